/*
 * import_dir.c - an ImageFolder tree SRC/<class>/<file> becomes records
 * {data: uint8[-1] (the file's bytes), label: int64 (the class's index in
 * sorted class-name order)}, in (class, file name) strcmp order; the
 * class names go into dataset.json ("classes").
 *
 * Every non-hidden directory under SRC is a class, even an empty one, so
 * labels do not shift when a class happens to have no files.  Hidden
 * entries (leading '.') are skipped; entries that are not regular files
 * (after following symlinks) are ignored.  The listing is held in memory
 * (names only); file contents are read one at a time.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "import_common.h"

struct name_list {
	char **v;
	size_t n, cap;
};

static void names_free(struct name_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static int names_push(struct name_list *l, const char *name)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		char **v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n] = strdup(name);
	if (!l->v[l->n])
		return -ENOMEM;
	l->n++;
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The non-hidden entries of @path of type @want (S_IFDIR or S_IFREG),
 * sorted with strcmp. */
static int list_entries(const char *path, mode_t want, struct name_list *out,
			char *err, size_t errlen)
{
	struct dirent *de;
	DIR *d;
	int r = 0;

	d = opendir(path);
	if (!d)
		return import_fail(err, errlen, -errno, "%s: %s", path,
				   strerror(errno));
	while ((errno = 0, de = readdir(d)) != NULL) {
		struct stat st;

		if (de->d_name[0] == '.')
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, 0) < 0) {
			/* A dangling symlink is not a regular file. */
			if (errno == ENOENT)
				continue;
			r = import_fail(err, errlen, -errno, "%s/%s: %s", path,
					de->d_name, strerror(errno));
			goto out;
		}
		if ((st.st_mode & S_IFMT) != want)
			continue;
		r = names_push(out, de->d_name);
		if (r < 0) {
			import_fail(err, errlen, r, "%s: out of memory", path);
			goto out;
		}
	}
	if (errno) {
		r = import_fail(err, errlen, -errno, "%s: %s", path,
				strerror(errno));
		goto out;
	}
	if (out->n > 1)  /* an empty class has no array: qsort(NULL) is UB */
		qsort(out->v, out->n, sizeof(*out->v), cmp_names);
out:
	closedir(d);
	return r;
}

struct dir_tree {
	struct name_list classes;
	struct name_list *files;  /* per class */
	uint64_t nfiles;
};

static void tree_free(struct dir_tree *t)
{
	if (t->files)
		for (size_t c = 0; c < t->classes.n; c++)
			names_free(&t->files[c]);
	free(t->files);
	names_free(&t->classes);
}

static int tree_scan(const char *src, struct dir_tree *t, char *err,
		     size_t errlen)
{
	int r;

	memset(t, 0, sizeof(*t));
	r = list_entries(src, S_IFDIR, &t->classes, err, errlen);
	if (r < 0)
		return r;
	t->files = calloc(t->classes.n ? t->classes.n : 1, sizeof(*t->files));
	if (!t->files)
		return import_fail(err, errlen, -ENOMEM, "%s: out of memory",
				   src);
	for (size_t c = 0; c < t->classes.n; c++) {
		char *path;

		if (asprintf(&path, "%s/%s", src, t->classes.v[c]) < 0)
			return import_fail(err, errlen, -ENOMEM,
					   "%s: out of memory", src);
		r = list_entries(path, S_IFREG, &t->files[c], err, errlen);
		free(path);
		if (r < 0)
			return r;
		t->nfiles += t->files[c].n;
	}
	return 0;
}

static void dir_schema(struct sluice_field f[2])
{
	memset(f, 0, 2 * sizeof(*f));
	strcpy(f[0].name, "data");
	f[0].dtype = (DLDataType){ .code = kDLUInt, .bits = 8, .lanes = 1 };
	f[0].ndim = 1;
	f[0].shape[0] = -1;
	strcpy(f[1].name, "label");
	f[1].dtype = (DLDataType){ .code = kDLInt, .bits = 64, .lanes = 1 };
	f[1].ndim = 0;
}

int import_dir(const struct import_options *o,
	       struct sluice_writer_summary *sum, char *err, size_t errlen)
{
	struct sluice_field fields[2];
	struct import_sink sink = { 0 };
	struct import_buf buf = { 0 };
	struct dir_tree tree;
	uint64_t lo, hi, index = 0;
	char *path = NULL;
	int r;

	r = import_check_part(o, err, errlen);
	if (r < 0)
		return r;
	r = tree_scan(o->src, &tree, err, errlen);
	if (r < 0)
		goto out;
	if (tree.classes.n == 0) {
		r = import_fail(err, errlen, -SLUICE_EINPUT,
				"%s: no class directories", o->src);
		goto out;
	}
	import_part_range(o, tree.nfiles, &lo, &hi);
	dir_schema(fields);
	r = import_sink_open(&sink, o, fields, 2, hi - lo, err, errlen);
	if (r < 0)
		goto out;
	/* label i is class folder i: dataset.json keeps the names */
	r = sluice_writer_set_classes(sink.w, "label",
				      (const char *const *)tree.classes.v,
				      (uint32_t)tree.classes.n);
	if (r < 0) {
		import_fail(err, errlen, r, "%s: cannot keep %zu class names: %s",
			    o->src, tree.classes.n, sluice_strerror(r));
		goto out;
	}
	for (size_t c = 0; c < tree.classes.n && index < hi; c++) {
		int64_t label = (int64_t)c;

		for (size_t i = 0; i < tree.files[c].n; i++, index++) {
			const void *values[2];
			uint64_t lengths[2];

			if (index < lo)
				continue;
			if (index >= hi)
				break;
			free(path);
			if (asprintf(&path, "%s/%s/%s", o->src,
				     tree.classes.v[c], tree.files[c].v[i]) < 0) {
				path = NULL;
				r = import_fail(err, errlen, -ENOMEM,
						"out of memory");
				goto out;
			}
			r = import_read_file(path, &buf);
			if (r < 0) {
				import_fail(err, errlen, r, "%s: %s", path,
					    r == -SLUICE_EINPUT ?
						    "not a regular file" :
						    strerror(-r));
				goto out;
			}
			values[0] = buf.p;
			lengths[0] = buf.len;
			values[1] = &label;
			lengths[1] = sizeof(label);
			r = import_sink_add(&sink, values, lengths, path, err,
					    errlen);
			if (r < 0)
				goto out;
		}
	}
	r = import_sink_close(&sink, sum, err, errlen);
out:
	import_sink_abort(&sink);
	free(path);
	import_buf_free(&buf);
	tree_free(&tree);
	return r;
}
