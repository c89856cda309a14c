#!/bin/sh
# The Spark and Ray recipes of python/README.md are whole programs (issue
# 25: they used df, ds and schema without defining them):
# - everywhere: each block that starts "# spark_to_sluice.py" or
#   "# ray_to_sluice.py" compiles, and every name it reads is bound in it
#   (import, assignment, def, for, with, comprehension) or is a builtin;
# - where pyspark (with java) or ray is importable, the block runs as
#   written in an empty folder, with the sluice package built from this
#   tree, and its own asserts check the dataset it wrote (the folder then
#   has no OUT.parts left).
# Exit 0 pass, 1 fail; the last line says which recipes ran.
BUILD=${BUILD:-build}
root=$(pwd)
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || { echo "$PY not found"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-recipes.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

"$PY" - "$root/python/README.md" "$tmp" <<'PYEOF' || exit 1
import ast, builtins, re, sys

text = open(sys.argv[1]).read()
blocks = re.findall(r"```python\n(.*?)```", text, re.S)
want = {"spark_to_sluice.py": None, "ray_to_sluice.py": None}
for b in blocks:
    first = b.splitlines()[0] if b.strip() else ""
    for name in want:
        if first.startswith("# " + name):
            want[name] = b
bad = 0
for name, src in want.items():
    if src is None:
        print("FAIL: python/README.md has no block starting '# %s'" % name)
        bad += 1
        continue
    tree = ast.parse(src, name)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                bound.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
            bound.update(x.arg for x in node.args.args) \
                if isinstance(node, ast.FunctionDef) else None
        elif isinstance(node, ast.Name) and isinstance(
                node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    used = sorted({n.id for n in ast.walk(tree)
                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                   and n.id not in bound})
    if used:
        print("FAIL: %s in python/README.md uses %s without defining it"
              % (name, ", ".join(used)))
        bad += 1
    else:
        print("ok: %s: every name it uses is defined" % name)
    with open("%s/%s" % (sys.argv[2], name), "w") as f:
        f.write(src)
sys.exit(1 if bad else 0)
PYEOF

# Run them where the engines are: the test's python, or make
# test-engines' venv.
ran=""
for cand in "$PY" "$root/build/engines-venv/bin/python"; do
	[ -x "$(command -v "$cand" 2>/dev/null)" ] || continue
	for eng in spark ray; do
		case " $ran " in *" $eng "*) continue ;; esac
		mod=pyspark; [ $eng = ray ] && mod=ray.data
		"$cand" -c "import $mod, pyarrow, numpy" 2>/dev/null || continue
		[ $eng = spark ] && ! command -v java >/dev/null 2>&1 && continue
		if [ ! -d "$tmp/lib-$(basename "$cand")" ]; then
			(cd python && SLUICE_BUILD="$root/$BUILD" "$cand" setup.py -q build \
				--build-base "$tmp/b" --build-lib "$tmp/lib-$(basename "$cand")") \
				>"$tmp/build.log" 2>&1 ||
				{ tail -n 20 "$tmp/build.log"; echo "FAIL: building the package"; exit 1; }
		fi
		mkdir -p "$tmp/run-$eng"
		(cd "$tmp/run-$eng" && PYTHONPATH="$tmp/lib-$(basename "$cand")" \
			timeout 300 "$cand" "$tmp/${eng}_to_sluice.py") >"$tmp/$eng.log" 2>&1 ||
			{ tail -n 30 "$tmp/$eng.log"; echo "FAIL: ${eng}_to_sluice.py as written"; exit 1; }
		[ -d "$tmp/run-$eng/train-shards.parts" ] &&
			{ echo "FAIL: ${eng}_to_sluice.py left train-shards.parts"; exit 1; }
		echo "ok: ${eng}_to_sluice.py ran as written ($cand)"
		ran="$ran $eng"
	done
done
case $ran in
*spark*ray*|*ray*spark*) echo "recipes: both checked and run" ;;
"") echo "recipes: names checked; not run (neither pyspark nor ray is installed: make test-engines installs them)" ;;
*) echo "recipes: names checked; ran:$ran (the other engine is not installed)" ;;
esac
