/* checks.c: outputs read back with real parsers (see checks.h). Jansson
 * parses the Chrome trace, libxml2 the SVG, and sampled text is drawn again
 * here from the checkpoint; every comparison is against the
 * schedule's pass lists and the timeline the writer was given, never against
 * an earlier output. */
#include "checks.h"
#include "cli.h"

#include <jansson.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <glob.h>

#include "pipemem/pm_gpt.h"
#include "pipemem/pm_train.h"
#include "pipemem/pm_util.h"

static int bad(char *msg, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* Equal to the writer's "%.12g" (relative 1e-10, or tiny absolute). */
static int near12(double got, double want) {
    return fabs(got - want) <= 1e-10 * fabs(want) + 1e-12;
}

static const pm_pass *pass_at(const pm_sched *s, int d, int64_t i) {
    return &pm_sched_dev(s, d)[i];
}

static const char *kind_name(int k) {
    return k >= 0 && k < PM_PASS_COUNT ? pm_pass_names[k] : "?";
}

/* ---- Chrome trace ------------------------------------------------------------ */

/* Checks one "X" event against pass i of device d; *prev_end is the end of
 * the device's previous event. */
static int trace_event(json_t *e, const pm_sched *s, const pm_sim *sim, int d, int64_t i,
                       double *prev_end, char *msg, size_t cap) {
    const pm_pass *ps = pass_at(s, d, i);
    json_t *pid = json_object_get(e, "pid"), *ts = json_object_get(e, "ts");
    json_t *dur = json_object_get(e, "dur"), *name = json_object_get(e, "name");
    json_t *args = json_object_get(e, "args");
    json_t *stage = json_object_get(args, "stage"), *mb = json_object_get(args, "mb");
    if (!json_is_integer(pid) || json_integer_value(pid) != 0)
        return bad(msg, cap, "trace: device %d event %lld: pid is not 0", d, (long long)i);
    if (!json_is_number(ts) || !json_is_number(dur))
        return bad(msg, cap, "trace: device %d event %lld: ts or dur is not a number", d,
                   (long long)i);
    char want[32];
    snprintf(want, sizeof want, "%s mb%d", kind_name(ps->kind), (int)ps->mb);
    if (!json_is_string(name) || strcmp(json_string_value(name), want))
        return bad(msg, cap, "trace: device %d event %lld: name %s, the schedule has %s", d,
                   (long long)i, json_is_string(name) ? json_string_value(name) : "(none)", want);
    if (!json_is_integer(stage) || json_integer_value(stage) != ps->stage ||
        !json_is_integer(mb) || json_integer_value(mb) != ps->mb)
        return bad(msg, cap, "trace: device %d event %lld: args stage/mb differ from the "
                   "schedule's (stage %d mb %d)", d, (long long)i, (int)ps->stage, (int)ps->mb);
    double t0 = json_number_value(ts), dt = json_number_value(dur);
    if (!(dt >= 0) || !isfinite(t0))
        return bad(msg, cap, "trace: device %d event %lld: ts %g dur %g (end before start)", d,
                   (long long)i, t0, dt);
    if (t0 < *prev_end - 1e-9 * fabs(*prev_end))
        return bad(msg, cap, "trace: device %d event %lld starts at %g, before the previous "
                   "one ends (%g)", d, (long long)i, t0, *prev_end);
    *prev_end = t0 + dt;
    if (sim) {
        int64_t at = (int64_t)d * s->cap + i;
        if (!near12(t0, sim->start[at]) || !near12(dt, sim->end[at] - sim->start[at]))
            return bad(msg, cap, "trace: device %d event %lld: ts %.12g dur %.12g, the timeline "
                       "has %.12g..%.12g", d, (long long)i, t0, dt, sim->start[at],
                       sim->end[at]);
    }
    return 0;
}

static int trace_events(json_t *evs, const pm_sched *s, const pm_sim *sim, char *msg,
                        size_t cap) {
    int64_t *next = calloc((size_t)s->p, sizeof *next);
    double *end = calloc((size_t)s->p, sizeof *end);
    int *names = calloc((size_t)s->p, sizeof *names);
    int rc = next && end && names ? 0 : bad(msg, cap, "trace: out of memory");
    size_t k;
    json_t *e;
    json_array_foreach(evs, k, e) {
        if (rc) break;
        json_t *ph = json_object_get(e, "ph"), *tid = json_object_get(e, "tid");
        if (!json_is_string(ph)) {
            rc = bad(msg, cap, "trace: event %zu has no \"ph\"", k);
            break;
        }
        int d = json_is_integer(tid) ? (int)json_integer_value(tid) : -1;
        json_t *nm = json_object_get(e, "name");
        if (!strcmp(json_string_value(ph), "M")) {
            if (json_is_string(nm) && !strcmp(json_string_value(nm), "thread_name") && d >= 0 &&
                d < s->p)
                names[d]++;
            continue;
        }
        if (strcmp(json_string_value(ph), "X")) {
            rc = bad(msg, cap, "trace: event %zu has ph \"%s\"", k, json_string_value(ph));
        } else if (d < 0 || d >= s->p || json_integer_value(tid) != d) {
            rc = bad(msg, cap, "trace: event %zu: tid is not a device 0..%d", k, s->p - 1);
        } else if (next[d] >= s->len[d]) {
            rc = bad(msg, cap, "trace: device %d has more events than its %lld passes", d,
                     (long long)s->len[d]);
        } else {
            rc = trace_event(e, s, sim, d, next[d], &end[d], msg, cap);
            next[d]++;
        }
    }
    for (int d = 0; d < s->p && !rc; d++) {
        if (next[d] != s->len[d])
            rc = bad(msg, cap, "trace: device %d has %lld events for %lld passes", d,
                     (long long)next[d], (long long)s->len[d]);
        else if (names[d] != 1)
            rc = bad(msg, cap, "trace: device %d has %d thread_name events", d, names[d]);
    }
    free(next);
    free(end);
    free(names);
    return rc;
}

int chk_trace(const char *json, size_t len, const pm_sched *s, const pm_sim *sim, char *msg,
              size_t cap) {
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root)
        return bad(msg, cap, "trace: not JSON: line %d column %d: %s", je.line, je.column,
                   je.text);
    json_t *evs = json_object_get(root, "traceEvents");
    int rc = json_is_array(evs) ? trace_events(evs, s, sim, msg, cap)
                                : bad(msg, cap, "trace: no traceEvents array");
    json_decref(root);
    return rc;
}

/* ---- SVG --------------------------------------------------------------------- */

static int is_elem(const xmlNode *n, const char *name) {
    return n && n->type == XML_ELEMENT_NODE && !strcmp((const char *)n->name, name);
}

/* Attribute as text (caller frees with xmlFree), NULL if absent. */
static char *attr(const xmlNode *n, const char *name) {
    return (char *)xmlGetProp(n, (const xmlChar *)name);
}

/* Attribute as a number; NAN if absent or not a number. */
static double num(const xmlNode *n, const char *name) {
    char *v = attr(n, name), *end = NULL;
    double x = v ? strtod(v, &end) : NAN;
    if (v && (end == v || *end)) x = NAN;
    xmlFree(v);
    return x;
}

static int attr_is(const xmlNode *n, const char *name, const char *want) {
    char *v = attr(n, name);
    int same = v && !strcmp(v, want);
    xmlFree(v);
    return same;
}

static const xmlNode *next_elem(const xmlNode *n, const char *name) {
    for (; n; n = n->next)
        if (is_elem(n, name)) return n;
    return NULL;
}

/* The <title> of a pass box names its device, kind, stage and microbatch. */
static int svg_title(const xmlNode *r, const pm_pass *ps, int d, int64_t i, char *msg,
                     size_t cap) {
    const xmlNode *t = next_elem(r->children, "title");
    if (!t) return 0;
    xmlChar *txt = xmlNodeGetContent(t);
    int dd = -1, st = -1, mb = -1;
    char kind[8] = "";
    int ok = txt && sscanf((const char *)txt, "device %d: %7s stage %d mb %d", &dd, kind, &st,
                           &mb) == 4;
    xmlFree(txt);
    if (!ok || dd != d || strcmp(kind, kind_name(ps->kind)) || st != ps->stage || mb != ps->mb)
        return bad(msg, cap, "svg: device %d box %lld: title says device %d %s stage %d mb %d, "
                   "the schedule has %s stage %d mb %d", d, (long long)i, dd, kind, st, mb,
                   kind_name(ps->kind), (int)ps->stage, (int)ps->mb);
    return 0;
}

/* Checks row d: its background rect, then one box per pass. span: the time
 * at the right edge (the last end), for the scale. */
static int svg_row(const xmlNode *g, const pm_sched *s, const pm_sim *sim, int d, double span,
                   char *msg, size_t cap) {
    const xmlNode *bg = next_elem(g->children, "rect");
    if (!bg) return bad(msg, cap, "svg: device %d row has no background rect", d);
    double bx = num(bg, "x"), by = num(bg, "y"), bw = num(bg, "width");
    if (!isfinite(bx) || !isfinite(by) || !(bw > 0))
        return bad(msg, cap, "svg: device %d background rect has no x, y or width", d);
    double k = bw / span, prev_x = -INFINITY, prev_w = 0;
    int64_t i = 0;
    for (const xmlNode *r = next_elem(bg->next, "rect"); r; r = next_elem(r->next, "rect"), i++) {
        if (i >= s->len[d])
            return bad(msg, cap, "svg: device %d has more boxes than its %lld passes", d,
                       (long long)s->len[d]);
        double x = num(r, "x"), y = num(r, "y"), w = num(r, "width");
        if (!isfinite(x) || !(w > 0) || y != by)
            return bad(msg, cap, "svg: device %d box %lld: x %g y %g width %g (row y %g)", d,
                       (long long)i, x, y, w, by);
        /* Boxes are drawn at least 0.3 wide; coordinates have 2 decimals. */
        if (x < bx - 0.01 || x + w > bx + bw + 0.51 ||
            x < prev_x + (prev_w > 0.31 ? prev_w : 0) - 0.02)
            return bad(msg, cap, "svg: device %d box %lld at x %g width %g overlaps the previous "
                       "box or leaves the row", d, (long long)i, x, w);
        prev_x = x;
        prev_w = w;
        if (sim) {
            /* The row's width is rounded to whole pixels: half a pixel. */
            int64_t at = (int64_t)d * s->cap + i;
            double wx = bx + sim->start[at] * k, ww = (sim->end[at] - sim->start[at]) * k;
            if (fabs(x - wx) > 0.52 || (ww > 0.3 && fabs(w - ww) > 0.52))
                return bad(msg, cap, "svg: device %d box %lld at x %g width %g, the timeline "
                           "puts it at %g width %g", d, (long long)i, x, w, wx, ww);
        }
        if (svg_title(r, pass_at(s, d, i), d, i, msg, cap)) return -1;
    }
    if (i != s->len[d])
        return bad(msg, cap, "svg: device %d has %lld boxes for %lld passes", d, (long long)i,
                   (long long)s->len[d]);
    return 0;
}

static int svg_rows(const xmlNode *root, const pm_sched *s, const pm_sim *sim, char *msg,
                    size_t cap) {
    double span = 0;
    if (sim)
        for (int d = 0; d < s->p; d++)
            for (int64_t i = 0; i < s->len[d]; i++)
                if (sim->end[(int64_t)d * s->cap + i] > span)
                    span = sim->end[(int64_t)d * s->cap + i];
    if (!(span > 0) || !isfinite(span)) span = 1;
    int d = 0;
    for (const xmlNode *g = next_elem(root->children, "g"); g; g = next_elem(g->next, "g")) {
        if (!attr_is(g, "class", "dev")) continue;
        char id[32];
        snprintf(id, sizeof id, "dev%d", d);
        if (d >= s->p || !attr_is(g, "id", id))
            return bad(msg, cap, "svg: device row %d is not %s of %d devices", d, id, s->p);
        if (svg_row(g, s, sim, d, span, msg, cap)) return -1;
        d++;
    }
    return d == s->p ? 0 : bad(msg, cap, "svg: %d device rows for %d devices", d, s->p);
}

int chk_svg(const char *svg, size_t len, const pm_sched *s, const pm_sim *sim, char *msg,
            size_t cap) {
    if (len > (size_t)1 << 30) return bad(msg, cap, "svg: %zu bytes", len);
    xmlDoc *doc = xmlReadMemory(svg, (int)len, "timeline.svg", NULL,
                                XML_PARSE_NONET | XML_PARSE_HUGE | XML_PARSE_NOERROR |
                                    XML_PARSE_NOWARNING);
    if (!doc) {
        const xmlError *e = xmlGetLastError();
        return bad(msg, cap, "svg: not well-formed XML: line %d: %s", e ? e->line : 0,
                   e && e->message ? e->message : "?");
    }
    const xmlNode *root = xmlDocGetRootElement(doc);
    int rc = is_elem(root, "svg") ? svg_rows(root, s, sim, msg, cap)
                                  : bad(msg, cap, "svg: the root element is not <svg>");
    xmlFreeDoc(doc);
    return rc;
}

/* ---- files ------------------------------------------------------------------- */

static int chk_file(int (*chk)(const char *, size_t, const pm_sched *, const pm_sim *, char *,
                               size_t),
                    const char *path, const pm_sched *s, const pm_sim *sim, char *msg,
                    size_t cap) {
    char *buf;
    size_t n;
    pm_err err;
    if (pm_read_file(path, PM_TEXT_MAX, &buf, &n, &err))
        return bad(msg, cap, "%s", err.msg);
    int rc = chk(buf, n, s, sim, msg, cap);
    pm_free(buf);
    return rc;
}

int chk_trace_file(const char *path, const pm_sched *s, const pm_sim *sim, char *msg,
                   size_t cap) {
    return chk_file(chk_trace, path, s, sim, msg, cap);
}

int chk_svg_file(const char *path, const pm_sched *s, const pm_sim *sim, char *msg, size_t cap) {
    return chk_file(chk_svg, path, s, sim, msg, cap);
}

/* ---- sample ------------------------------------------------------------------ */

/* The n bytes the model should generate after prompt (see checks.h). */
static int sample_expect(const char *ckpt, const char *prompt, int n, int seed, uint8_t *out,
                         char *msg, size_t cap) {
    pm_ckpt_info info;
    float *params = NULL;
    pm_err err;
    if (pm_ckpt_load_params(ckpt, &info, &params, &err)) return bad(msg, cap, "%s", err.msg);
    const pm_gpt_config *c = &info.cfg.model;
    size_t plen = strlen(prompt), total = plen + (size_t)n;
    int32_t *tok = malloc(total * sizeof *tok);
    void *work = malloc(pm_gpt_work_bytes(c, 1, c->ctx));
    float *pr = malloc((size_t)c->vocab * sizeof *pr);
    int rc = tok && work && pr ? 0 : bad(msg, cap, "sample: out of memory");
    pm_gpt_rng rng;
    pm_gpt_rng_seed(&rng, (uint64_t)seed, 0x73616d706c65ull); /* "sample" */
    for (size_t i = 0; i < plen && !rc; i++) tok[i] = (uint8_t)prompt[i];
    for (size_t k = plen; k < total && !rc; k++) {
        int T = k > (size_t)c->ctx ? c->ctx : (int)k;
        pm_gpt_forward(c, 1, T, params, tok + k - T, NULL, work);
        pm_gpt_work_probs_row(c, 1, T, params, work, (size_t)T - 1, pr);
        double sum = 0, acc = 0;
        for (int v = 0; v < c->vocab; v++) sum += pr[v];
        double u = pm_gpt_rng_uniform(&rng) * sum;
        int pick = c->vocab - 1;
        for (int v = 0; v < c->vocab; v++)
            if (u < (acc += pr[v])) {
                pick = v;
                break;
            }
        tok[k] = pick;
        out[k - plen] = (uint8_t)pick;
    }
    free(tok);
    free(work);
    free(pr);
    pm_free(params);
    return rc;
}

int chk_sample(const char *bin, const char *ckpt, const char *prompt, int n, int seed,
               char *msg, size_t cap) {
    size_t plen = strlen(prompt), want = plen + (size_t)n + 1;
    uint8_t *exp = malloc((size_t)n + 1);
    if (!exp) return bad(msg, cap, "sample: out of memory");
    if (sample_expect(ckpt, prompt, n, seed, exp, msg, cap)) {
        free(exp);
        return -1;
    }
    char out[4096];
    snprintf(out, sizeof out, "%s.sample.txt", ckpt);
    int st = chk_sh(NULL, "'%s' sample --ckpt '%s' --prompt '%s' -n %d --seed %d > '%s'", bin,
                    ckpt, prompt, n, seed, out);
    char *buf = NULL;
    size_t len = 0;
    pm_err err;
    int rc = 0;
    if (st != 0) rc = bad(msg, cap, "sample --ckpt '%s' exited with status %d", ckpt, st);
    else if (pm_read_file(out, PM_TEXT_MAX, &buf, &len, &err)) rc = bad(msg, cap, "%s", err.msg);
    else if (len != want)
        rc = bad(msg, cap, "sample printed %zu bytes; prompt %zu + %d + newline = %zu", len,
                 plen, n, want);
    else if (memcmp(buf, prompt, plen) || buf[len - 1] != '\n')
        rc = bad(msg, cap, "sample: output does not start with the prompt or end with a newline");
    for (size_t i = 0; i < (size_t)n && !rc; i++)
        if ((uint8_t)buf[plen + i] != exp[i])
            rc = bad(msg, cap, "sample: byte %zu after the prompt is %u, the model draws %u", i,
                     (uint8_t)buf[plen + i], exp[i]);
    pm_free(buf);
    free(exp);
    remove(out);
    return rc;
}

pm_status chk_ckpt_whole(const char *path, pm_ckpt_info *info, pm_err *err) {
    pm_status st = pm_ckpt_info_read(path, info, err);
    uint64_t sums[PM_CKPT_SLABS];
    for (int s = 0; s < PM_CKPT_SLABS && !st; s++)
        st = pm_ckpt_read_part(path, info, s, 0, NULL, info->n_params, &sums[s], err);
    return st ? st : pm_ckpt_check_sums(path, info, PM_CKPT_ALL, sums, err);
}

int chk_tmp_count(const char *path) {
    char pat[4200];
    /* PATH.tmp.PID.N.TAG, TAG 16 hex digits (pm_tmp_open) */
    snprintf(pat, sizeof pat, "%s.tmp.[1-9]*.[0-9]*.%s", path,
             "[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]"
             "[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]");
    glob_t g;
    int n = glob(pat, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    globfree(&g);
    return n;
}

int chk_rm_rf(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- train --json ------------------------------------------------------------ */

/* The summary line of a train run's output, parsed; NULL if none. */
static json_t *train_json(const char *out) {
    const char *p = strstr(out, "{\"steps\"");
    if (!p) return NULL;
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    return json_loadb(p, n, 0, NULL);
}

static int array_of(json_t *a, double *v, int max) {
    if (!json_is_array(a)) return -1;
    int n = (int)json_array_size(a);
    for (int i = 0; i < n; i++) {
        json_t *x = json_array_get(a, (size_t)i);
        if (!json_is_number(x)) return -1;
        if (i < max) v[i] = json_number_value(x);
    }
    return n;
}

int chk_json_array(const char *out, const char *key, double *v, int max) {
    json_t *j = train_json(out);
    int n = j ? array_of(json_object_get(j, key), v, max) : -1;
    json_decref(j);
    return n;
}

/* Planned bytes of kind `k` of device g; -1 if missing. */
static double planned(json_t *pl, int g, const char *k) {
    json_t *x = json_object_get(json_array_get(pl, (size_t)g), k);
    return json_is_number(x) ? json_number_value(x) : -1;
}

int chk_json_planned(const char *out, const char *kind, double *v, int max) {
    json_t *j = train_json(out);
    json_t *pl = json_object_get(j, "planned_bytes");
    int n = json_is_array(pl) ? (int)json_array_size(pl) : -1;
    for (int g = 0; g < n && g < max; g++)
        if ((v[g] = planned(pl, g, kind)) < 0) n = -1;
    json_decref(j);
    return n;
}

int chk_train_alloc(const char *out, double whole, char *msg, size_t cap) {
    json_t *j = train_json(out);
    if (!j) return bad(msg, cap, "no JSON summary line in the output");
    json_t *pl = json_object_get(j, "planned_bytes");
    double al[64], params = json_number_value(json_object_get(j, "params"));
    int nd = array_of(json_object_get(j, "allocated_bytes"), al, 64);
    int dp = (int)json_integer_value(json_object_get(j, "dp")), rc = 0;
    double sum = 0;
    if (nd <= 0 || nd > 64 || !json_is_array(pl) || (int)json_array_size(pl) != nd ||
        params <= 0 || dp <= 0)
        rc = bad(msg, cap, "the summary lacks planned_bytes, allocated_bytes (one per device), "
                 "params or dp");
    for (int g = 0; g < nd && !rc; g++) {
        double big = planned(pl, g, "parameters") + planned(pl, g, "gradients") +
                     planned(pl, g, "moments") + planned(pl, g, "activations");
        double total = planned(pl, g, "total");
        sum += planned(pl, g, "parameters");
        if (!(al[g] >= big && al[g] <= total * 1.02 + 65536))
            rc = bad(msg, cap, "device %d allocated %.0f bytes; its plan: %.0f in all, %.0f of "
                     "state and arena", g, al[g], total, big);
        else if (al[g] > whole * 16 * params)
            rc = bad(msg, cap, "device %d allocated %.0f bytes, over %.2f of the whole model's "
                     "%.0f (16 per parameter)", g, al[g], whole, 16 * params);
    }
    if (!rc && sum != 4 * params * dp)
        rc = bad(msg, cap, "the devices plan %.0f bytes of parameters; %d replica(s) of %.0f "
                 "parameters are %.0f", sum, dp, params, 4 * params * dp);
    json_decref(j);
    return rc;
}
