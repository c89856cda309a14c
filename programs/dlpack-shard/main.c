/*
 * main.c - `dlpack-shard`: convert datasets into the
 * dlpack-shard format and inspect, verify, read and merge them.
 */
#include <stdio.h>

#include "cli.h"

void cli_usage(FILE *f)
{
	fputs(
"Usage: " CLI_NAME " COMMAND [ARGS]\n"
"\n"
"  convert SRC --out DIR [options]   convert a source dataset (DIR must be\n"
"                                    missing or empty)\n"
"      --from dir|tar|npy|parquet|synth  source kind (guessed: directory ->\n"
"                                    dir, *.tar, *.npy, *.parquet)\n"
"      --shard-size BYTES            stored bytes per shard (K/M/G suffixes)\n"
"      --records-per-shard N         records per shard (exclusive with above)\n"
"      --block-size BYTES            target raw bytes per block (1M)\n"
"      --compression none|zstd[:L]   block codec (zstd: zstd:3, the default)\n"
"      --threads N                   compression threads (0: min(4, CPUs))\n"
"      --part I/N                    convert only slice I (0-based) of N\n"
"                                    (tar: a first pass counts samples)\n"
"      --prefix NAME                 shard file names NAME-00000.dls\n"
"      --quiet                       no progress and no summary line\n"
"      --json                        print a summary object on stdout\n"
"      --strict                      any entry skipped is an error (else\n"
"                                    counted by kind on stderr)\n"
"      --follow-symlinks             dir: follow symlinks out of SRC (by\n"
"                                    default they are skipped)\n"
"    dir:   SRC/<class>/<file> -> data (uint8[-1]), label (int64); files\n"
"           in folders below a class folder belong to that class\n"
"    tar:   WebDataset tars: SRC is one tar, a comma-separated list, a\n"
"           glob or a brace pattern (shard-{000..099}.tar), read in\n"
"           order; a uint8[-1] field per extension, .cls/.cls2/.index\n"
"           as int64 when the first sample's value is an integer, and\n"
"           __key__ (uint8[-1]) first unless --drop-key\n"
"    npy:   a.npy[,b.npy...] -> one fixed field per file, record i = row i\n"
"    parquet: a file, a folder of *.parquet or a glob; numeric columns\n"
"           fixed, list/binary/string variable; runs $SLUICE_PYTHON\n"
"           (python3) -m sluice.parquet, which needs pyarrow\n"
"    synth: no SRC; --records N --seed S\n"
"           --field NAME:DTYPE[:SHAPE[:COMPRESSIBILITY]] (repeatable)\n"
"           SHAPE: 3x224x224, -1 or -1xK (variable), scalar (default)\n"
"  info PATH [--json]                schema, shards, records, sizes\n"
"  verify PATH                       check every header, index and block\n"
"  cat PATH --index I --field F      write one field of one record to stdout\n"
"  cat PATH --hash                   'INDEX FIELD XXH64' per record and field\n"
"  merge DIR... --out DIR [--verify] [--copy]\n"
"                                    join datasets written with --part (OUT\n"
"                                    new or empty, not a part; --verify:\n"
"                                    check every block of every part first).\n"
"                                    OUT's shards are hard links to the\n"
"                                    parts' (copies across filesystems): a\n"
"                                    part edited in place later changes OUT\n"
"                                    too; --copy copies every shard instead\n"
"  clean OUT                         remove what interrupted writes into\n"
"                                    OUT left: its hidden .tmp files and\n"
"                                    OUT.parts/ (Spark and Ray staging);\n"
"                                    refuses while a writer holds OUT or a\n"
"                                    part; never removes committed shards\n"
"\n"
"PATH is a dataset directory, a shard file, a comma-separated list of\n"
"shards or a glob.  A directory is checked against its dataset.json; a\n"
"list or glob trusts the caller to name the right shards (only a shard\n"
"of an unfinished write, or a dataset with shards missing, is refused).\n"
"Exit status: 0 ok, 1 error, 2 usage error.\n",
	      f);
}

int main(int argc, char **argv)
{
	static const struct cli_subcommand commands[] = {
		{ "convert", cli_convert }, { "info", cli_info },
		{ "verify", cli_verify },   { "cat", cli_cat },
		{ "merge", cli_merge },     { "clean", cli_clean },
	};
	static const struct cli_program program = {
		CLI_NAME, cli_usage, commands,
		sizeof(commands) / sizeof(commands[0]),
	};

	return cli_main(&program, argc, argv);
}
