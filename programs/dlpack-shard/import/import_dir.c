/*
 * import_dir.c - an ImageFolder tree SRC/<class>/<file> becomes records
 * {data: uint8[-1] (the file's bytes), label: int64 (the class's index in
 * sorted class-name order)}, in (class, file name) strcmp order; the
 * class names go into dataset.json ("classes").
 *
 * Every non-hidden directory under SRC is a class, even an empty one, so
 * labels do not shift when a class happens to have no files.  Files in
 * folders nested under a class folder belong to that class (their path
 * below it orders them).  Nothing is skipped silently: hidden entries
 * (leading '.'), symlinks out of SRC (unless --follow-symlinks),
 * dangling symlinks, folder loops, FIFOs, sockets, devices and files
 * beside the class folders are counted by kind (import_skip), or are an
 * error with --strict.  The listing is held in memory (names only); file
 * contents are read one at a time.
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

/* Folders deeper than this under a class are reported as a loop. */
#define WALK_DEPTH_MAX 64

struct walk {
	const struct import_options *o;
	char *root;             /* realpath of the source folder */
	size_t root_len;
	dev_t dev[WALK_DEPTH_MAX + 2];  /* folders on the current path */
	ino_t ino[WALK_DEPTH_MAX + 2];
	int depth;
	char *err;
	size_t errlen;
};

static enum import_skip_kind special_kind(mode_t m)
{
	if (S_ISFIFO(m))
		return IMPORT_SKIP_FIFO;
	if (S_ISSOCK(m))
		return IMPORT_SKIP_SOCKET;
	return IMPORT_SKIP_DEVICE;
}

/*
 * What entry @name of the open folder @dfd (@path: its full name) is.
 * A symlink is followed when its target lies inside the source tree, or
 * anywhere with --follow-symlinks; hidden names, links out of the tree,
 * dangling links and special files are skipped (counted, or an error
 * with --strict).  @return: 1 with *@st the (followed) stat of a folder
 * or regular file, 0 skipped, negative on error.
 */
static int examine(struct walk *w, int dfd, const char *path,
		   const char *name, struct stat *st)
{
	const struct import_options *o = w->o;

	if (name[0] == '.')
		return import_skip(o, IMPORT_SKIP_HIDDEN, path, w->err,
				   w->errlen);
	if (fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) < 0)
		return import_fail(w->err, w->errlen, -errno, "%s: %s", path,
				   strerror(errno));
	if (S_ISLNK(st->st_mode)) {
		char *real = realpath(path, NULL);
		int inside;

		if (!real) {
			if (errno == ENOENT || errno == ELOOP ||
			    errno == ENOTDIR)
				return import_skip(o, IMPORT_SKIP_DANGLING,
						   path, w->err, w->errlen);
			return import_fail(w->err, w->errlen, -errno, "%s: %s",
					   path, strerror(errno));
		}
		inside = strncmp(real, w->root, w->root_len) == 0 &&
			 (real[w->root_len] == '/' || real[w->root_len] == 0 ||
			  w->root_len == 1);
		free(real);
		if (!inside && !o->follow_symlinks)
			return import_skip(o, IMPORT_SKIP_OUTSIDE, path,
					   w->err, w->errlen);
		if (fstatat(dfd, name, st, 0) < 0)
			return import_skip(o, IMPORT_SKIP_DANGLING, path,
					   w->err, w->errlen);
	}
	if (S_ISDIR(st->st_mode) || S_ISREG(st->st_mode))
		return 1;
	return import_skip(o, special_kind(st->st_mode), path, w->err,
			   w->errlen);
}

/* Enter folder @st: 0, or 1 when it is already on the path (a symlink
 * loop) or too deep, which is skipped. */
static int walk_push(struct walk *w, const char *path, const struct stat *st,
		     int *skipped)
{
	*skipped = 0;
	for (int i = 0; i < w->depth; i++)
		if (w->dev[i] == st->st_dev && w->ino[i] == st->st_ino) {
			*skipped = 1;
			break;
		}
	if (w->depth > WALK_DEPTH_MAX)
		*skipped = 1;
	if (*skipped)
		return import_skip(w->o, IMPORT_SKIP_LOOP, path, w->err,
				   w->errlen);
	w->dev[w->depth] = st->st_dev;
	w->ino[w->depth] = st->st_ino;
	w->depth++;
	return 0;
}

/*
 * Every regular file under folder @path, at any depth, into @out as its
 * path relative to the class folder (@rel: this folder's, "" at the
 * top).  Files in nested folders belong to the class they are under.
 */
static int walk_files(struct walk *w, const char *path, const char *rel,
		      struct name_list *out)
{
	struct dirent *de;
	DIR *d;
	int r = 0;

	d = opendir(path);
	if (!d)
		return import_fail(w->err, w->errlen, -errno, "%s: %s", path,
				   strerror(errno));
	while ((errno = 0, de = readdir(d)) != NULL) {
		char *full = NULL, *sub = NULL;
		struct stat st;
		int skipped;

		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		if (asprintf(&full, "%s/%s", path, de->d_name) < 0 ||
		    asprintf(&sub, "%s%s%s", rel, *rel ? "/" : "",
			     de->d_name) < 0) {
			free(full);
			r = import_fail(w->err, w->errlen, -ENOMEM,
					"%s: out of memory", path);
			goto out;
		}
		r = examine(w, dirfd(d), full, de->d_name, &st);
		if (r == 1 && S_ISDIR(st.st_mode)) {
			r = walk_push(w, full, &st, &skipped);
			if (r == 0 && !skipped) {
				r = walk_files(w, full, sub, out);
				w->depth--;
			}
		} else if (r == 1) {
			r = names_push(out, sub);
			if (r < 0)
				import_fail(w->err, w->errlen, r,
					    "%s: out of memory", path);
		}
		free(full);
		free(sub);
		if (r < 0)
			goto out;
		r = 0;
	}
	if (errno)
		r = import_fail(w->err, w->errlen, -errno, "%s: %s", path,
				strerror(errno));
out:
	closedir(d);
	return r;
}

/* The class folders of @src, sorted with strcmp; files beside them and
 * special entries are skipped (counted). */
static int list_classes(struct walk *w, const char *src,
			struct name_list *out)
{
	struct dirent *de;
	DIR *d;
	int r = 0;

	d = opendir(src);
	if (!d)
		return import_fail(w->err, w->errlen, -errno, "%s: %s", src,
				   strerror(errno));
	while ((errno = 0, de = readdir(d)) != NULL) {
		char *full;
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		if (asprintf(&full, "%s/%s", src, de->d_name) < 0) {
			r = import_fail(w->err, w->errlen, -ENOMEM,
					"%s: out of memory", src);
			goto out;
		}
		r = examine(w, dirfd(d), full, de->d_name, &st);
		if (r == 1 && S_ISREG(st.st_mode))
			r = import_skip(w->o, IMPORT_SKIP_NOT_IN_CLASS, full,
					w->err, w->errlen);
		else if (r == 1 && (r = names_push(out, de->d_name)) < 0)
			import_fail(w->err, w->errlen, r, "%s: out of memory",
				    src);
		free(full);
		if (r < 0)
			goto out;
		r = 0;
	}
	if (errno) {
		r = import_fail(w->err, w->errlen, -errno, "%s: %s", src,
				strerror(errno));
		goto out;
	}
	if (out->n > 1)  /* no classes: no array, and qsort(NULL) is UB */
		qsort(out->v, out->n, sizeof(*out->v), cmp_names);
out:
	closedir(d);
	return r;
}

struct dir_tree {
	struct name_list classes;
	struct name_list *files;  /* per class: paths below the class */
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

static int tree_scan(const struct import_options *o, struct dir_tree *t,
		     char *err, size_t errlen)
{
	struct walk w = { .o = o, .err = err, .errlen = errlen };
	const char *src = o->src;
	struct stat st;
	int r;

	memset(t, 0, sizeof(*t));
	w.root = realpath(src, NULL);
	if (!w.root || stat(w.root, &st) < 0) {
		r = import_fail(err, errlen, -errno, "%s: %s", src,
				strerror(errno));
		goto out;
	}
	w.root_len = strlen(w.root);
	w.dev[0] = st.st_dev;
	w.ino[0] = st.st_ino;
	w.depth = 1;
	r = list_classes(&w, src, &t->classes);
	if (r < 0)
		goto out;
	t->files = calloc(t->classes.n ? t->classes.n : 1, sizeof(*t->files));
	if (!t->files) {
		r = import_fail(err, errlen, -ENOMEM, "%s: out of memory", src);
		goto out;
	}
	for (size_t c = 0; c < t->classes.n; c++) {
		char *path;
		int skipped;

		if (asprintf(&path, "%s/%s", src, t->classes.v[c]) < 0) {
			r = import_fail(err, errlen, -ENOMEM,
					"%s: out of memory", src);
			goto out;
		}
		r = stat(path, &st) < 0 ? -errno : 0;
		if (r == 0)
			r = walk_push(&w, path, &st, &skipped);
		if (r == 0 && !skipped) {
			r = walk_files(&w, path, "", &t->files[c]);
			w.depth--;
		}
		free(path);
		if (r < 0)
			goto out;
		/* (class, path below it) order; an empty class has no
		 * array, and qsort(NULL) is UB */
		if (t->files[c].n > 1)
			qsort(t->files[c].v, t->files[c].n,
			      sizeof(*t->files[c].v), cmp_names);
		t->nfiles += t->files[c].n;
	}
out:
	free(w.root);
	return r;
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
	r = tree_scan(o, &tree, err, errlen);
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
