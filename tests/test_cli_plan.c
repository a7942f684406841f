/* test_cli_plan.c: `pipemem plan` through the built binary (tests/cli.h):
 *   - `plan --pipemem-gpt` says, byte for byte, what `train --pp --json`
 *     plans on each device (every kind and the total), the arena it
 *     allocates and the largest activation peak it measures, at 2 and 4
 *     devices, 1f1b and v-half;
 *   - the 9.6B table lists every kind, its SVG is well formed with one
 *     point per plan, JSON's best is the first plan, and its errors name
 *     the flags. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "checks.h"
#include "cli.h"
#include "pipemem/pm_plan.h"

static const char *bin;
static char dir[256];

/* Runs cmd (printf-style) through chk_sh; its standard output, the
 * caller's to free (NULL if it failed). */
static char *run_out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *run_out(const char *fmt, ...) {
    char cmd[1500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    chk_cmd c = {0};
    char *out = chk_sh(&c, "%s", cmd) ? NULL : c.out;
    if (out) c.out = NULL; /* the caller's now */
    chk_cmd_free(&c);
    return out;
}

/* The JSON object on the line of out that starts with '{' and holds key. */
static json_t *json_line(const char *out, const char *key) {
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (*l != '{' || !strstr(l, key)) continue;
        json_error_t e;
        json_t *j = json_loadb(l, strcspn(l, "\n") == strlen(l) ? strlen(l) : strlen(l), 0, &e);
        if (j) return j;
    }
    return NULL;
}

static double num_at(json_t *arr, size_t i) { return json_number_value(json_array_get(arr, i)); }

/* What train --pp P --schedule K plans on each device is what plan
 * --pipemem-gpt says, byte for byte: every kind (its parameters, gradients,
 * moments, activation arena, workspace and transport buffers) and their
 * total; and what train allocated and measured: each device's arena and
 * the largest activation peak. */
static void test_cli_train_bytes(void **state) {
    (void)state;
    const char *kinds[] = {"1f1b", "v-half"};
    /* plan's names of the kinds (pipemem plan's JSON) against train's */
    static const char *const pk[] = {"parameters", "gradients", "optimizer", "activations",
                                     "workspace", "transport"};
    for (int p = 2; p <= 4; p += 2)
        for (int k = 0; k < 2; k++) {
            char *tr = run_out("OPENBLAS_NUM_THREADS=1 %s train --data %s/d --layers 6 --dim 64 "
                               "--heads 4 --ctx 32 --batch 8 --microbatches 8 --pp %d "
                               "--schedule %s --steps 1 --eval-every 0 --json 2>/dev/null",
                               bin, dir, p, kinds[k]);
            char *pl = run_out("%s plan --pipemem-gpt --layers 6 --hidden 64 --heads 4 --seq 32 "
                               "--vocab 256 --pp %d --mbs 1 --microbatches 8 --kind %s "
                               "--format json", bin, p, kinds[k]);
            if (!tr || !pl) fail_msg("%s p=%d: a command failed", kinds[k], p);
            json_t *t = json_line(tr, "\"steps\""), *j = json_loads(pl, 0, NULL);
            assert_non_null(t);
            assert_non_null(j);
            json_t *best = json_object_get(j, "best");
            json_t *per = json_object_get(best, "per_device_gb");
            json_t *peak = json_object_get(t, "peak_activation_bytes");
            json_t *planned = json_object_get(t, "planned_bytes");
            json_t *arena = json_object_get(t, "arena_bytes");
            assert_int_equal(json_array_size(peak), p);
            double most = 0;
            for (int d = 0; d < p; d++) {
                json_t *dev = json_array_get(planned, (size_t)d);
                for (int q = 0; q < PM_BYTES_COUNT; q++) {
                    double want = json_number_value(json_object_get(dev, pm_bytes_names[q]));
                    double got = round(num_at(json_object_get(per, pk[q]), (size_t)d) * 1e9);
                    if (got != want)
                        fail_msg("%s p=%d device %d %s: plan %.0f, train %.0f", kinds[k], p, d,
                                 pm_bytes_names[q], got, want);
                }
                double got = round(num_at(json_object_get(per, "total"), (size_t)d) * 1e9);
                double all = json_number_value(json_object_get(dev, "total"));
                if (got != all)
                    fail_msg("%s p=%d device %d: plan %.0f bytes in all, train %.0f", kinds[k],
                             p, d, got, all);
                got = round(num_at(json_object_get(per, "activations"), (size_t)d) * 1e9);
                if (got != num_at(arena, (size_t)d))
                    fail_msg("%s p=%d device %d: plan an arena of %.0f bytes, train allocated "
                             "%.0f", kinds[k], p, d, got, num_at(arena, (size_t)d));
                most = fmax(most, num_at(peak, (size_t)d));
            }
            double got = round(json_number_value(json_object_get(best, "activation_gb")) * 1e9);
            if (got != most)
                fail_msg("%s p=%d: plan's largest activation peak %.0f, train measured %.0f",
                         kinds[k], p, got, most);
            print_message("%s p=%d: every device's bytes as train plans them, its arena as it "
                          "allocates it, the activation peak as it measures\n", kinds[k], p);
            json_decref(t);
            json_decref(j);
            free(tr);
            free(pl);
        }
}

/* The command: the 9.6B table lists every kind, the SVG is well formed with
 * one point per plan, JSON's best is the first plan, and its errors name
 * the flags. */
static void test_cli_plan(void **state) {
    (void)state;
    const char *m96 = "--layers 30 --hidden 5120 --heads 40 --seq 1024 --vocab 51200 --mbs 2 "
                      "--devices 16 --pp 16 --microbatches 64 --device-mem 80G "
                      "--device-tflops 312";
    char *js = run_out("%s plan %s --format json", bin, m96);
    assert_non_null(js);
    json_t *j = json_loads(js, 0, NULL);
    assert_non_null(j);
    json_t *plans = json_object_get(j, "plans"), *best = json_object_get(j, "best");
    assert_true(json_array_size(plans) >= 20);
    assert_true(json_equal(best, json_array_get(plans, 0)));
    assert_true(json_is_true(json_object_get(best, "fits")));
    const char *fields[] = {"kind", "pp", "dp", "mbs", "microbatches", "activation_gb",
                            "state_gb", "total_gb", "fits", "bubble", "step_s",
                            "samples_per_s", "mfu", "per_device_gb"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!json_object_get(best, fields[i])) fail_msg("no %s in best", fields[i]);
    size_t nplans = json_array_size(plans);
    json_decref(j);
    free(js);
    char *svg = run_out("%s plan %s --format svg", bin, m96);
    assert_non_null(svg);
    xmlDocPtr doc = xmlReadMemory(svg, (int)strlen(svg), "plan.svg", NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    if (!doc) fail_msg("the SVG is not well-formed XML");
    xmlNodePtr root = xmlDocGetRootElement(doc);
    assert_string_equal((const char *)root->name, "svg");
    size_t points = 0, fronts = 0;
    for (xmlNodePtr n = root->children; n; n = n->next) {
        xmlChar *cls = n->type == XML_ELEMENT_NODE ? xmlGetProp(n, BAD_CAST "class") : NULL;
        points += cls && !strcmp((const char *)cls, "plan");
        fronts += cls && !strcmp((const char *)cls, "front");
        xmlFree(cls);
    }
    xmlFreeDoc(doc);
    assert_int_equal(points, nplans);
    assert_int_equal(fronts, 1);
    free(svg);
    /* --pipemem-gpt times a context over PM_PLACE_MEASURE_CTX at that
     * length and says so in the title; a shorter one whole, saying nothing */
    const char *tiny = "--pipemem-gpt --layers 1 --hidden 16 --heads 2 --vocab 64 --pp 2 --mbs 1 "
                       "--microbatches 2 --kind 1f1b";
    char *lg = run_out("%s plan %s --seq %d", bin, tiny, 2 * PM_PLACE_MEASURE_CTX);
    char *sh = run_out("%s plan %s --seq 32", bin, tiny), want[80];
    snprintf(want, sizeof want, "seq %d, vocab 64 (passes timed at seq %d, scaled by FLOPs) on 2",
             2 * PM_PLACE_MEASURE_CTX, PM_PLACE_MEASURE_CTX);
    assert_non_null(lg);
    assert_non_null(sh);
    if (!strstr(lg, want)) fail_msg("no '%s' in:\n%s", want, lg);
    assert_non_null(strstr(sh, "seq 32, vocab 64 on 2 devices"));
    free(lg);
    free(sh);
    int want_seq[2] = {PM_PLACE_MEASURE_CTX, 0}, seqs[2] = {2 * PM_PLACE_MEASURE_CTX, 32};
    for (int i = 0; i < 2; i++) { /* JSON's field; its model line is the model alone */
        char *o = run_out("%s plan %s --seq %d --format json", bin, tiny, seqs[i]);
        json_t *jo = o ? json_loads(o, 0, NULL) : NULL;
        assert_non_null(jo);
        assert_int_equal(json_integer_value(json_object_get(jo, "timed_seq")), want_seq[i]);
        assert_null(strstr(json_string_value(json_object_get(jo, "model")), "timed"));
        json_decref(jo);
        free(o);
        /* CSV's last column, in every row */
        o = run_out("%s plan %s --seq %d --format csv | tail -n +2 | awk -F, '{print $NF}' | "
                    "sort -u", bin, tiny, seqs[i]);
        char line[32];
        snprintf(line, sizeof line, "%d\n", want_seq[i]);
        assert_non_null(o);
        assert_string_equal(o, line);
        free(o);
    }
    char *err = run_out("%s plan --layers 30 --hidden 5120 --heads 7 --seq 1024 --vocab 51200 "
                        "--devices 16 --device-mem 80G --device-tflops 312 --microbatches 8 "
                        "2>&1 >/dev/null; true", bin);
    assert_non_null(err);
    assert_non_null(strstr(err, "pipemem: plan: --heads 7 must divide --hidden 5120"));
    free(err);
    /* kinds the shape cannot take (V and loops need 8 stages of 6 layers)
     * are skipped, and the line says why */
    err = run_out("%s plan --layers 4 --hidden 512 --heads 8 --seq 256 --vocab 5120 --devices 4 "
                  "--pp 4 --mbs 1 --microbatches 8 --device-mem 8G --device-tflops 100 "
                  "2>&1 >/dev/null", bin);
    assert_non_null(err);
    if (!strstr(err, "could not be planned; the last: --layers is 4: with the embedding and the "
                     "head 6 layers, fewer than the 8 stages"))
        fail_msg("%s", err);
    free(err);
    /* a rate beyond the model's range names the option, not the field */
    err = run_out("%s plan --layers 4 --hidden 512 --heads 8 --seq 256 --vocab 5120 --devices 4 "
                  "--pp 4 --mbs 1 --microbatches 8 --device-mem 8G --device-tflops 1e30 "
                  "2>&1 >/dev/null; true", bin);
    assert_non_null(err);
    if (!strstr(err, "pipemem: plan: --device-tflops is 1e+30")) fail_msg("%s", err);
    free(err);
    /* --pipemem-gpt refuses what it would ignore, by name, and what it lacks */
    const struct {
        const char *args, *want;
    } bad[] = {{"--microbatches 2 --kind 1f1b --link-gbps 1", "--link-gbps is for GPU plans"},
               {"--microbatches 2 --kind 1f1b --precision fp32", "--precision is for GPU plans"},
               {"--global-batch 4 --kind 1f1b", "--global-batch is for GPU plans"},
               {"--kind 1f1b", "give --pp, --mbs, --microbatches and --kind"},
               {"--microbatches 2 --kind auto", "--kind auto searches under the devices' "
                                                "memory: give --device-mem SIZE"}};
    const char *one = "--pipemem-gpt --layers 1 --hidden 16 --heads 2 --vocab 64 --pp 2 --mbs 1";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = run_out("%s plan %s --seq 32 %s 2>&1 >/dev/null; true", bin, one, bad[i].args);
        assert_non_null(err);
        if (!strstr(err, bad[i].want)) fail_msg("'%s': %s", bad[i].args, err);
        free(err);
    }
}

static int setup(void **state) {
    (void)state;
    bin = chk_bin();
    snprintf(dir, sizeof dir, "/tmp/pm_test_cli_plan_%d", (int)getpid());
    return chk_prepare(bin, dir, 2000, "line $((i + 1)) of a corpus for the planner");
}

static int teardown(void **state) {
    (void)state;
    return chk_rm_rf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_train_bytes),
        cmocka_unit_test(test_cli_plan),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
