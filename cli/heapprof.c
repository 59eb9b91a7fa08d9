/* heapprof.c — tcmctl heap-profile: tcmd's samples (each an allocation, its
 * size, the mean interval it was sampled at, its process and stack) made
 * into a pprof profile or the top allocation sites (docs/DESIGN.md, "Heap
 * profiles"). Each process's addresses are its own: they are symbolized in
 * the files its code mappings name, at its load addresses (libdw: function
 * names from the symbol tables, files and lines where the files have DWARF).
 * The mappings are what the process said of itself: tcmctl opens only
 * regular files, and a lie costs only that process's own stacks. */
#define _GNU_SOURCE
#include "heapprof.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "prim.h"
#include "profile.pb-c.h"

#define FRAMES_MAX 64 /* a sample's frames tcmctl looks at (tcmd keeps fewer) */

/* ---- a map from byte strings to indices ---- */

typedef struct keymap {
    size_t cap, n;
    char **keys;
    size_t *lens;
    size_t *vals;
} keymap_t;

static uint64_t hash_bytes(const void *k, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const unsigned char *)k)[i]) * 1099511628211ull;
    return h;
}

static bool keymap_grow(keymap_t *m)
{
    keymap_t g = {m->cap ? m->cap * 2 : 256, 0, NULL, NULL, NULL};
    g.keys = calloc(g.cap, sizeof *g.keys);
    g.lens = calloc(g.cap, sizeof *g.lens);
    g.vals = calloc(g.cap, sizeof *g.vals);
    if (!g.keys || !g.lens || !g.vals) {
        free(g.keys), free(g.lens), free(g.vals);
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t j = hash_bytes(m->keys[i], m->lens[i]) & (g.cap - 1);
        while (g.keys[j])
            j = (j + 1) & (g.cap - 1);
        g.keys[j] = m->keys[i], g.lens[j] = m->lens[i], g.vals[j] = m->vals[i];
        g.n++;
    }
    free(m->keys), free(m->lens), free(m->vals);
    *m = g;
    return true;
}

/* The value of key; a new key gets `fresh` and *added is set. SIZE_MAX:
 * out of memory. */
static size_t keymap_get(keymap_t *m, const void *key, size_t len, size_t fresh, bool *added)
{
    *added = false;
    if ((m->n + 1) * 2 > m->cap && !keymap_grow(m))
        return SIZE_MAX;
    size_t j = hash_bytes(key, len) & (m->cap - 1);
    for (; m->keys[j]; j = (j + 1) & (m->cap - 1))
        if (m->lens[j] == len && !memcmp(m->keys[j], key, len))
            return m->vals[j];
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return SIZE_MAX;
    memcpy(copy, key, len);
    m->keys[j] = copy, m->lens[j] = len, m->vals[j] = fresh;
    m->n++;
    *added = true;
    return fresh;
}

static void keymap_free(keymap_t *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->keys[i]);
    free(m->keys), free(m->lens), free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- each process's mappings and symbols ---- */

typedef struct mapping {
    uint64_t start, limit, offset, bias;
    char build_id[64];
    char path[4096];
    uint64_t pprof_id;   /* its Mapping's id, 0 until used */
    bool reported;       /* given to the process's Dwfl */
} mapping_t;

typedef struct proc {
    const Tcm__ProfileProc *rec;
    mapping_t *maps;
    size_t nmaps;
    Dwfl *dwfl;
} proc_t;

typedef struct symbolizer {
    proc_t *procs;       /* by record index */
    size_t nprocs;
} symbolizer_t;

static void parse_maps(proc_t *p)
{
    const char *text = p->rec->maps ? p->rec->maps : "";
    size_t lines = 1;
    for (const char *c = text; *c; c++)
        lines += *c == '\n';
    p->maps = calloc(lines, sizeof *p->maps);
    if (!p->maps)
        return;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[4096 + 256];
        if (len < sizeof buf) {
            memcpy(buf, line, len);
            buf[len] = 0;
            mapping_t *m = &p->maps[p->nmaps];
            int at = 0;
            unsigned long long s, l, o, b;
            if (sscanf(buf, "%llx %llx %llx %llx %63s %n", &s, &l, &o, &b, m->build_id, &at) == 5 && at > 0 &&
                l > s && buf[at]) {
                m->start = s, m->limit = l, m->offset = o, m->bias = b;
                snprintf(m->path, sizeof m->path, "%s",
                         strcmp(buf + at, TCM_MAPS_PROGRAM) || !p->rec->exe ? buf + at : p->rec->exe);
                p->nmaps++;
            }
        }
        line += len + (end != NULL);
    }
}

static mapping_t *mapping_of(proc_t *p, uint64_t addr)
{
    for (size_t i = 0; i < p->nmaps; i++)
        if (addr >= p->maps[i].start && addr < p->maps[i].limit)
            return &p->maps[i];
    return NULL;
}

static const Dwfl_Callbacks dwfl_callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
};

/* The module of m in p's Dwfl, reported at the process's load address so
 * that its addresses are the process's. Only a regular file. */
static Dwfl_Module *module_of(proc_t *p, mapping_t *m, uint64_t addr)
{
    if (!p->dwfl && !(p->dwfl = dwfl_begin(&dwfl_callbacks)))
        return NULL;
    if (!m->reported) {
        m->reported = true;
        bool known = false;
        for (size_t i = 0; i < p->nmaps; i++) /* another segment of the same file reported it */
            known |= &p->maps[i] != m && p->maps[i].reported && p->maps[i].bias == m->bias &&
                     !strcmp(p->maps[i].path, m->path) && dwfl_addrmodule(p->dwfl, p->maps[i].start);
        if (!known && tcm__is_regular_file(m->path)) {
            dwfl_report_begin_add(p->dwfl);
            dwfl_report_elf(p->dwfl, m->path, m->path, -1, m->bias, false);
            dwfl_report_end(p->dwfl, NULL, NULL);
        }
    }
    return dwfl_addrmodule(p->dwfl, addr);
}

typedef struct where {
    char func[256], file[256];
    int line;
    mapping_t *map;
} where_t;

/* What the code at addr of process p is: a return address, so the call
 * before it (addr - 1) is looked up. */
static void symbolize(symbolizer_t *sy, uint32_t proc, uint64_t addr, where_t *w)
{
    memset(w, 0, sizeof *w);
    if (proc >= sy->nprocs || !sy->procs[proc].rec)
        return;
    proc_t *p = &sy->procs[proc];
    uint64_t pc = addr ? addr - 1 : 0;
    w->map = mapping_of(p, pc);
    if (!w->map)
        return;
    Dwfl_Module *mod = module_of(p, w->map, pc);
    const char *name = mod ? dwfl_module_addrname(mod, pc) : NULL;
    if (name)
        snprintf(w->func, sizeof w->func, "%s", name);
    Dwfl_Line *l = mod ? dwfl_module_getsrc(mod, pc) : NULL;
    const char *file = l ? dwfl_lineinfo(l, NULL, &w->line, NULL, NULL, NULL) : NULL;
    if (file)
        snprintf(w->file, sizeof w->file, "%s", file);
}

static bool symbolizer_init(symbolizer_t *sy, const tcm_hp_t *hp)
{
    size_t n = 0;
    for (size_t i = 0; i < hp->nprocs; i++)
        n = hp->procs[i]->index + 1 > n ? hp->procs[i]->index + 1 : n;
    sy->nprocs = n;
    sy->procs = calloc(n ? n : 1, sizeof *sy->procs);
    if (!sy->procs)
        return false;
    for (size_t i = 0; i < hp->nprocs; i++) {
        proc_t *p = &sy->procs[hp->procs[i]->index];
        p->rec = hp->procs[i];
        parse_maps(p);
    }
    return true;
}

static void symbolizer_free(symbolizer_t *sy)
{
    for (size_t i = 0; i < sy->nprocs; i++) {
        if (sy->procs[i].dwfl)
            dwfl_end(sy->procs[i].dwfl);
        free(sy->procs[i].maps);
    }
    free(sy->procs);
}

/* What one sample stands for: tcmalloc's unbiased weight, the inverse of
 * the chance that an allocation of size bytes was sampled at this mean
 * interval (exponential intervals: 1 - e^(-size/interval)). */
static double weight(const Tcm__ProfileSample *s)
{
    if (!s->interval || !s->size)
        return 1;
    return 1 / -expm1(-(double)s->size / (double)s->interval);
}

/* ---- the top sites ---- */

static int by_bytes(const void *a, const void *b)
{
    double x = ((const tcm_hp_site_t *)a)->bytes, y = ((const tcm_hp_site_t *)b)->bytes;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void count_pid(tcm_hp_site_t *site, uint32_t pid, keymap_t *seen, size_t index)
{
    uint64_t key[2] = {index, pid};
    bool added;
    keymap_get(seen, key, sizeof key, 0, &added);
    if (!added)
        return;
    if (site->procs < sizeof site->pids / sizeof site->pids[0])
        site->pids[site->procs] = pid;
    site->procs++;
}

long tcm__hp_top(const tcm_hp_t *hp, tcm_hp_site_t **out)
{
    symbolizer_t sy;
    keymap_t sites = {0}, seen = {0};
    size_t n = 0, cap = 64;
    tcm_hp_site_t *rows = calloc(cap, sizeof *rows);
    if (!rows || !symbolizer_init(&sy, hp)) {
        free(rows);
        return -1;
    }
    for (size_t i = 0; i < hp->nsamples; i++) {
        const Tcm__ProfileSample *s = hp->samples[i];
        where_t w;
        symbolize(&sy, s->proc, s->n_frame ? s->frame[0] : 0, &w);
        char key[600];
        if (!w.func[0] && w.map) {
            const char *base = strrchr(w.map->path, '/') ? strrchr(w.map->path, '/') + 1 : w.map->path;
            snprintf(w.func, sizeof w.func, "%.200s+0x%llx", base, (unsigned long long)(s->frame[0] - 1 - w.map->bias));
        }
        else if (!w.func[0])
            snprintf(w.func, sizeof w.func, "%s", s->n_frame ? "(unknown)" : "(no stack)");
        int klen = snprintf(key, sizeof key, "%s\n%s\n%d", w.func, w.file, w.line);
        bool added;
        size_t k = keymap_get(&sites, key, (size_t)klen < sizeof key ? (size_t)klen : sizeof key - 1, n, &added);
        if (k == SIZE_MAX)
            break;
        if (added) {
            if (n == cap) {
                tcm_hp_site_t *g = realloc(rows, 2 * cap * sizeof *rows);
                if (!g)
                    break;
                rows = g, cap *= 2;
            }
            memset(&rows[n], 0, sizeof rows[n]);
            memcpy(rows[n].func, w.func, sizeof w.func);
            memcpy(rows[n].file, w.file, sizeof w.file);
            rows[n].line = w.line;
            n++;
        }
        double wt = weight(s);
        rows[k].objects += wt;
        rows[k].bytes += wt * (double)s->size;
        const proc_t *p = s->proc < sy.nprocs ? &sy.procs[s->proc] : NULL;
        count_pid(&rows[k], p && p->rec ? p->rec->pid : 0, &seen, k);
    }
    keymap_free(&sites);
    keymap_free(&seen);
    symbolizer_free(&sy);
    qsort(rows, n, sizeof *rows, by_bytes);
    *out = rows;
    return (long)n;
}

/* ---- pprof ---- */

typedef struct pprof {
    Perftools__Profiles__Profile prof;
    keymap_t strings, functions, locations, samples;
    size_t cap_str, cap_fn, cap_loc, cap_smp, cap_map;
    symbolizer_t sy;
    bool oom;
} pprof_t;

/* Appends x to a growing array of pointers (*arr, *n, *cap). */
static bool push(void ***arr, size_t *n, size_t *cap, void *x)
{
    if (!x)
        return false;
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        void **g = realloc(*arr, c * sizeof *g);
        if (!g)
            return false;
        *arr = g, *cap = c;
    }
    (*arr)[(*n)++] = x;
    return true;
}

static int64_t str_id(pprof_t *pp, const char *s)
{
    bool added;
    size_t id = keymap_get(&pp->strings, s, strlen(s), pp->prof.n_string_table, &added);
    if (id == SIZE_MAX) {
        pp->oom = true;
        return 0;
    }
    if (added && !push((void ***)&pp->prof.string_table, &pp->prof.n_string_table, &pp->cap_str, strdup(s)))
        pp->oom = true;
    return (int64_t)id;
}

static uint64_t function_id(pprof_t *pp, const where_t *w)
{
    char key[520];
    int len = snprintf(key, sizeof key, "%s\n%s", w->func, w->file);
    bool added;
    size_t id = keymap_get(&pp->functions, key, (size_t)len < sizeof key ? (size_t)len : sizeof key - 1,
                           pp->prof.n_function + 1, &added);
    if (id == SIZE_MAX || !added)
        return id == SIZE_MAX ? 0 : id;
    Perftools__Profiles__Function *f = malloc(sizeof *f);
    if (!f) {
        pp->oom = true;
        return 0;
    }
    perftools__profiles__function__init(f);
    f->id = id;
    f->name = f->system_name = str_id(pp, w->func);
    f->filename = str_id(pp, w->file);
    if (!push((void ***)&pp->prof.function, &pp->prof.n_function, &pp->cap_fn, f))
        pp->oom = true;
    return id;
}

static uint64_t mapping_id(pprof_t *pp, mapping_t *m, bool symbolized)
{
    if (m->pprof_id)
        return m->pprof_id;
    Perftools__Profiles__Mapping *pm = malloc(sizeof *pm);
    if (!pm) {
        pp->oom = true;
        return 0;
    }
    perftools__profiles__mapping__init(pm);
    pm->id = m->pprof_id = pp->prof.n_mapping + 1;
    pm->memory_start = m->start;
    pm->memory_limit = m->limit;
    pm->file_offset = m->offset;
    pm->filename = str_id(pp, m->path);
    pm->build_id = str_id(pp, strcmp(m->build_id, "-") ? m->build_id : "");
    pm->has_functions = pm->has_filenames = pm->has_line_numbers = symbolized;
    if (!push((void ***)&pp->prof.mapping, &pp->prof.n_mapping, &pp->cap_map, pm))
        pp->oom = true;
    return pm->id;
}

static uint64_t location_id(pprof_t *pp, uint32_t proc, uint64_t addr)
{
    uint64_t key[2] = {proc, addr};
    bool added;
    size_t id = keymap_get(&pp->locations, key, sizeof key, pp->prof.n_location + 1, &added);
    if (id == SIZE_MAX || !added)
        return id == SIZE_MAX ? 0 : id;
    Perftools__Profiles__Location *loc = calloc(1, sizeof *loc);
    Perftools__Profiles__Line *line = calloc(1, sizeof *line);
    Perftools__Profiles__Line **lines = calloc(1, sizeof *lines);
    if (!loc || !line || !lines) {
        free(loc), free(line), free(lines);
        pp->oom = true;
        return 0;
    }
    perftools__profiles__location__init(loc);
    perftools__profiles__line__init(line);
    loc->id = id;
    loc->address = addr;
    where_t w;
    symbolize(&pp->sy, proc, addr, &w);
    if (w.map)
        loc->mapping_id = mapping_id(pp, w.map, w.func[0] != 0);
    if (w.func[0]) {
        line->function_id = function_id(pp, &w);
        line->line = w.line;
        lines[0] = line;
        loc->line = lines;
        loc->n_line = 1;
    } else {
        free(line), free(lines);
    }
    if (!push((void ***)&pp->prof.location, &pp->prof.n_location, &pp->cap_loc, loc))
        pp->oom = true;
    return id;
}

static Perftools__Profiles__Label *label(pprof_t *pp, const char *key, const char *str, int64_t num)
{
    Perftools__Profiles__Label *l = malloc(sizeof *l);
    if (!l) {
        pp->oom = true;
        return NULL;
    }
    perftools__profiles__label__init(l);
    l->key = str_id(pp, key);
    if (str)
        l->str = str_id(pp, str);
    else
        l->num = num;
    return l;
}

/* A new Sample for process proc and this stack. */
static Perftools__Profiles__Sample *new_sample(pprof_t *pp, const Tcm__ProfileSample *s)
{
    Perftools__Profiles__Sample *ps = calloc(1, sizeof *ps);
    uint64_t *locs = calloc(s->n_frame ? s->n_frame : 1, sizeof *locs);
    int64_t *vals = calloc(2, sizeof *vals);
    Perftools__Profiles__Label **labels = calloc(2, sizeof *labels);
    if (!ps || !locs || !vals || !labels) {
        free(ps), free(locs), free(vals), free(labels);
        pp->oom = true;
        return NULL;
    }
    perftools__profiles__sample__init(ps);
    for (size_t f = 0; f < s->n_frame; f++)
        locs[f] = location_id(pp, s->proc, s->frame[f]);
    ps->location_id = locs;
    ps->n_location_id = s->n_frame;
    ps->value = vals;
    ps->n_value = 2;
    const proc_t *p = s->proc < pp->sy.nprocs ? &pp->sy.procs[s->proc] : NULL;
    labels[0] = label(pp, "pid", NULL, p && p->rec ? p->rec->pid : 0);
    labels[1] = label(pp, "client", p && p->rec && p->rec->name ? p->rec->name : "", 0);
    ps->label = labels;
    ps->n_label = labels[0] && labels[1] ? 2 : 0;
    return ps;
}

static void add_sample(pprof_t *pp, const Tcm__ProfileSample *s)
{
    uint64_t key[FRAMES_MAX + 1];
    size_t nf = s->n_frame < FRAMES_MAX ? s->n_frame : FRAMES_MAX;
    key[0] = s->proc;
    memcpy(key + 1, s->frame, nf * sizeof key[0]);
    bool added;
    size_t k = keymap_get(&pp->samples, key, (nf + 1) * sizeof key[0], pp->prof.n_sample, &added);
    if (k == SIZE_MAX) {
        pp->oom = true;
        return;
    }
    if (added && !push((void ***)&pp->prof.sample, &pp->prof.n_sample, &pp->cap_smp, new_sample(pp, s))) {
        pp->oom = true;
        return;
    }
    double wt = weight(s);
    pp->prof.sample[k]->value[0] += llround(wt);
    pp->prof.sample[k]->value[1] += llround(wt * (double)s->size);
}

static void pprof_free(pprof_t *pp)
{
    Perftools__Profiles__Profile *p = &pp->prof;
    for (size_t i = 0; i < p->n_sample; i++) {
        for (size_t j = 0; j < p->sample[i]->n_label; j++)
            free(p->sample[i]->label[j]);
        free(p->sample[i]->label), free(p->sample[i]->location_id), free(p->sample[i]->value), free(p->sample[i]);
    }
    for (size_t i = 0; i < p->n_location; i++) {
        if (p->location[i]->n_line)
            free(p->location[i]->line[0]);
        free(p->location[i]->line), free(p->location[i]);
    }
    for (size_t i = 0; i < p->n_function; i++)
        free(p->function[i]);
    for (size_t i = 0; i < p->n_mapping; i++)
        free(p->mapping[i]);
    for (size_t i = 0; i < p->n_string_table; i++)
        free(p->string_table[i]);
    for (size_t i = 0; i < p->n_sample_type; i++)
        free(p->sample_type[i]);
    free(p->sample), free(p->location), free(p->function), free(p->mapping), free(p->string_table);
    free(p->sample_type), free(p->period_type);
    keymap_free(&pp->strings), keymap_free(&pp->functions), keymap_free(&pp->locations), keymap_free(&pp->samples);
    symbolizer_free(&pp->sy);
}

static Perftools__Profiles__ValueType *value_type(pprof_t *pp, const char *type, const char *unit)
{
    Perftools__Profiles__ValueType *v = malloc(sizeof *v);
    if (!v) {
        pp->oom = true;
        return NULL;
    }
    perftools__profiles__value_type__init(v);
    v->type = str_id(pp, type);
    v->unit = str_id(pp, unit);
    return v;
}

static int write_gzip(const uint8_t *buf, size_t len, FILE *out, char *err, size_t errlen)
{
    z_stream z = {0};
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        snprintf(err, errlen, "zlib: cannot start compressing");
        return -1;
    }
    uint8_t chunk[65536];
    z.next_in = (Bytef *)buf;
    z.avail_in = (uInt)len;
    int zr;
    do {
        z.next_out = chunk;
        z.avail_out = sizeof chunk;
        zr = deflate(&z, Z_FINISH);
        size_t have = sizeof chunk - z.avail_out;
        if (fwrite(chunk, 1, have, out) != have) {
            deflateEnd(&z);
            snprintf(err, errlen, "writing the profile: %s", strerror(errno));
            return -1;
        }
    } while (zr == Z_OK);
    deflateEnd(&z);
    if (zr != Z_STREAM_END) {
        snprintf(err, errlen, "zlib: compressing failed");
        return -1;
    }
    return 0;
}

int tcm__hp_pprof(const tcm_hp_t *hp, FILE *out, char *err, size_t errlen)
{
    pprof_t pp;
    memset(&pp, 0, sizeof pp);
    perftools__profiles__profile__init(&pp.prof);
    if (!symbolizer_init(&pp.sy, hp)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    str_id(&pp, ""); /* the format's: string 0 is empty */
    Perftools__Profiles__ValueType *types[2] = {value_type(&pp, "inuse_objects", "count"),
                                                value_type(&pp, "inuse_space", "bytes")};
    pp.prof.sample_type = malloc(sizeof types);
    if (pp.prof.sample_type) {
        memcpy(pp.prof.sample_type, types, sizeof types);
        pp.prof.n_sample_type = 2;
    } else {
        free(types[0]), free(types[1]);
        pp.oom = true;
    }
    pp.prof.period_type = value_type(&pp, "space", "bytes");
    pp.prof.period = (int64_t)hp->interval;
    pp.prof.default_sample_type = 1;
    pp.prof.time_nanos = (int64_t)time(NULL) * 1000000000;
    for (size_t i = 0; i < hp->nsamples && !pp.oom; i++)
        add_sample(&pp, hp->samples[i]);
    int rc = -1;
    if (pp.oom) {
        snprintf(err, errlen, "out of memory");
    } else {
        size_t len = perftools__profiles__profile__get_packed_size(&pp.prof);
        uint8_t *buf = malloc(len ? len : 1);
        if (!buf)
            snprintf(err, errlen, "out of memory");
        else {
            perftools__profiles__profile__pack(&pp.prof, buf);
            rc = write_gzip(buf, len, out, err, errlen);
        }
        free(buf);
    }
    pprof_free(&pp);
    return rc;
}
