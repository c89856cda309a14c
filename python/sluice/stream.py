"""Stream: one dataset of a mixture (Loader([Stream(...), ...]))."""
import math

from .dataset import Dataset


class Stream:
    """Stream(path, weight=1.0, samples=None)

    One dataset of a mixture, like MosaicML Streaming's Stream(proportion=,
    repeat=, choose=):

        loader = sluice.Loader([sluice.Stream("web", weight=0.7),
                                sluice.Stream("code", weight=0.3),
                                sluice.Stream("math", samples=50_000)],
                               batch_size=256, seed=0)

    samples: exactly this many samples of the dataset per epoch (its
        records repeated, reshuffled, or a subset, a different one each
        epoch).  Otherwise the weighted streams share, by weight, as many
        samples as they hold records together.
    Every batch holds each stream's share (to within one record per
    stream); the order is a function of seed and epoch; ranks split it and
    state_dict() resumes it (also elastically) as for one dataset.  Batch
    indices count the streams' records end to end, in the order given.
    """

    def __init__(self, path, weight=1.0, samples=None):
        self.dataset = path if isinstance(path, Dataset) else Dataset(path)
        weight = float(weight)
        if not math.isfinite(weight) or weight < 0:
            raise ValueError("weight must be a finite number >= 0, not %r"
                             % (weight,))
        if samples is not None and (not isinstance(samples, int)
                                    or isinstance(samples, bool)
                                    or samples < 1):
            raise ValueError("samples must be an int >= 1, not %r"
                             % (samples,))
        self.weight = weight
        self.samples = samples or 0

    def __repr__(self):
        return "Stream(%r, weight=%r, samples=%r)" % (
            self.dataset, self.weight, self.samples or None)
