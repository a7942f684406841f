/* test_api.c: the public functions given NULL or out-of-range arguments
 * (pm_util.h's rule for arguments, issue 31, 13 and 14). An input that is
 * NULL (a path, data, a configuration or request) or a number out of its
 * range (NaN and negatives included) is refused with PM_ERR_ARG naming it;
 * a function that returns no status does what its header says (pm_json_str
 * writes null, ASHA promotes none) or asserts, never reads through NULL or
 * divides by zero. Each call runs in a child process, so a crash is one
 * failed case (naming the call) rather than the end of the suite. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "pipemem/pm_cluster.h"
#include "pipemem/pm_data.h"
#include "pipemem/pm_runtime.h"
#include "pipemem/pm_select.h"
#include "pipemem/pm_tokenizer.h"
#include "schedule/sched.h"
#include "data/internal.h"
#include "select/parts.h"

/* What a case returns: its status and message, from the child. */
typedef struct {
    pm_status st;
    pm_err err;
} outcome;

typedef outcome (*call_fn)(void);

/* In a child: a crash ends it by its signal (cmocka's handlers, inherited,
 * would go on with the next tests in the child). */
static void default_signals(void) {
    const int sig[] = {SIGSEGV, SIGFPE, SIGBUS, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sig / sizeof sig[0]; i++) signal(sig[i], SIG_DFL);
}

/* Runs fn in a child; the child exits 0 if fn's status is want and its
 * message holds needle (NULL: any), 2 otherwise (printing both), and dies
 * by a signal if fn crashes. */
static void expect(const char *what, call_fn fn, pm_status want, const char *needle) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        default_signals();
        outcome o = fn();
        if (o.st == want && (!needle || strstr(o.err.msg, needle))) _exit(0);
        printf("%s: status %s, '%s' (wanted %s with '%s')\n", what, pm_status_str(o.st),
               o.err.msg, pm_status_str(want), needle ? needle : "");
        fflush(stdout);
        _exit(2);
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws)) fail_msg("%s: killed by signal %d", what, WTERMSIG(ws));
    if (WEXITSTATUS(ws)) fail_msg("%s: see the line above", what);
}

/* A byte file and a token file of them, for the calls that need one. */
static uint8_t bytes[400];
static pm_tokens toks = PM_TOKENS_BYTES(bytes, sizeof bytes);

static pm_train_cfg tiny(void) {
    pm_train_cfg c = {.model = {256, 8, 16, 2, 2}, .batch = 2, .micro = 1, .seed = 1};
    pm_optim_defaults(&c.opt, 2);
    return c;
}

/* ---- NULL inputs (13) ----------------------------------------------------------- */

static outcome tokens_write_null_data(void) {
    outcome o = {0};
    o.st = pm_tokens_write("/tmp/pm_test_api_unused.bin", NULL, 5, &o.err);
    return o;
}
static outcome tokens_write_null_path(void) {
    outcome o = {0};
    o.st = pm_tokens_write(NULL, bytes, 5, &o.err);
    return o;
}
static outcome tokens_read_null_path(void) {
    outcome o = {0};
    pm_tokens t;
    o.st = pm_tokens_read(&t, NULL, &o.err);
    return o;
}
static outcome sched_load_null_path(void) {
    outcome o = {0};
    pm_sched s;
    o.st = pm_sched_load(&s, NULL, &o.err);
    return o;
}
static outcome ckpt_info_null_path(void) {
    outcome o = {0};
    pm_ckpt_info info;
    o.st = pm_ckpt_info_read(NULL, &info, &o.err);
    return o;
}
static outcome trainer_null_tokens(void) {
    outcome o = {0};
    pm_trainer t;
    pm_train_cfg c = tiny();
    o.st = pm_trainer_init(&t, &c, NULL, 0, &o.err);
    return o;
}
static outcome trainer_null_cfg(void) {
    outcome o = {0};
    pm_trainer t;
    o.st = pm_trainer_init(&t, NULL, &toks, 0, &o.err);
    return o;
}
static outcome state_null_cfg(void) {
    outcome o = {0};
    pm_train_state st;
    o.st = pm_train_state_init(&st, NULL, &toks, &o.err);
    return o;
}
static outcome loader_null_tokens(void) {
    outcome o = {0};
    pm_loader ld;
    o.st = pm_loader_init(&ld, NULL, 8, 1, "train.bin", &o.err);
    return o;
}
static outcome sim_null_costs(void) {
    outcome o = {0};
    pm_sched s;
    pm_sim sim;
    pm_sched_req rq = {.p = 2, .m = 4, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    if ((o.st = pm_sched_generate(&s, "1f1b", &rq, &o.err))) return o;
    o.st = pm_sim_run(&sim, &s, NULL, &o.err);
    return o;
}
static outcome generate_null_req(void) {
    outcome o = {0};
    pm_sched s;
    o.st = pm_sched_generate(&s, "1f1b", NULL, &o.err);
    return o;
}
static outcome block_parse_null_text(void) {
    outcome o = {0};
    pm_block b;
    o.st = pm_block_parse(&b, NULL, 10, &o.err);
    return o;
}
static outcome plan_null_cfg(void) {
    outcome o = {0};
    pm_plan pl;
    pm_plan_req rq = {.p = 2};
    o.st = pm_plan_make(&pl, NULL, &rq, &o.err);
    return o;
}
static outcome pipe_null_plan(void) {
    outcome o = {0};
    pm_pipe *pp;
    o.st = pm_pipe_create(&pp, NULL, NULL, &o.err);
    return o;
}
static outcome prepare_null_dir(void) {
    outcome o = {0};
    const char *files[1] = {"/dev/null"};
    o.st = pm_data_prepare(files, 1, NULL, NULL, 0, NULL, &o.err);
    return o;
}
static outcome tokenizer_null_path(void) {
    outcome o = {0};
    const char *files[1] = {"/dev/null"};
    o.st = pm_tokenizer_train(files, 1, 300, NULL, &o.err);
    if (!pm_tokenizer_available()) o.st = PM_ERR_ARG, o.err = (pm_err){"path is NULL"};
    return o;
}
static outcome cluster_null_shape(void) {
    outcome o = {0};
    pm_cluster hw = {.devices = 2};
    pm_cluster_search_req rq = {.m = 2};
    pm_cluster_plan *plans;
    int n;
    o.st = pm_cluster_search(NULL, &hw, &rq, &plans, &n, NULL, &o.err);
    return o;
}

/* pm_json_str of NULL is JSON's null; ASHA with eta 0 promotes none. */
static outcome json_null(void) {
    outcome o = {0};
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    pm_json_str(f, NULL);
    fclose(f);
    o.st = strcmp(buf, "null") ? PM_ERR_FORMAT : PM_OK;
    snprintf(o.err.msg, sizeof o.err.msg, "wrote '%s'", buf);
    free(buf);
    return o;
}
static outcome asha_eta_zero(void) {
    outcome o = {0};
    double loss[3] = {1, 2, 3};
    unsigned char state[3] = {0, 0, 0}, promote[3] = {1, 1, 1};
    int order[3];
    int got = pm_select_asha_promote(0, 3, 1, 3, loss, state, promote, order);
    o.st = got == -1 && !promote[0] && !promote[1] && !promote[2] ? PM_OK : PM_ERR_ARG;
    snprintf(o.err.msg, sizeof o.err.msg, "returned %d", got);
    return o;
}

static void test_null_inputs_refused(void **state) {
    (void)state;
    const struct {
        const char *what;
        call_fn fn;
        const char *needle;
    } cases[] = {
        {"pm_tokens_write(path, NULL, 5)", tokens_write_null_data, "NULL"},
        {"pm_tokens_write(NULL, tok, 5)", tokens_write_null_path, "path is NULL"},
        {"pm_tokens_read(t, NULL)", tokens_read_null_path, "path is NULL"},
        {"pm_sched_load(s, NULL)", sched_load_null_path, "path is NULL"},
        {"pm_ckpt_info_read(NULL)", ckpt_info_null_path, "path is NULL"},
        {"pm_trainer_init(t, cfg, NULL)", trainer_null_tokens, "tokens are NULL"},
        {"pm_trainer_init(t, NULL, train)", trainer_null_cfg, "cfg is NULL"},
        {"pm_train_state_init(st, NULL)", state_null_cfg, "cfg is NULL"},
        {"pm_loader_init(ld, NULL)", loader_null_tokens, "tokens are NULL"},
        {"pm_sim_run(sim, s, NULL)", sim_null_costs, "costs (c) are NULL"},
        {"pm_sched_generate(s, kind, NULL)", generate_null_req, "req is NULL"},
        {"pm_block_parse(b, NULL, 10)", block_parse_null_text, "text is NULL"},
        {"pm_plan_make(pl, NULL, rq)", plan_null_cfg, "cfg is NULL"},
        {"pm_pipe_create(pp, NULL)", pipe_null_plan, "plan (pl) is NULL"},
        {"pm_data_prepare(files, 1, NULL)", prepare_null_dir, "(dir) is NULL"},
        {"pm_tokenizer_train(files, 1, 300, NULL)", tokenizer_null_path, "path is NULL"},
        {"pm_cluster_search(NULL, hw, rq)", cluster_null_shape, "shape (g) is NULL"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        expect(cases[k].what, cases[k].fn, PM_ERR_ARG, cases[k].needle);
    expect("pm_json_str(f, NULL)", json_null, PM_OK, NULL);
    expect("pm_select_asha_promote(eta 0)", asha_eta_zero, PM_OK, NULL);
}

/* pm_sched_lower_bound's costs must not be NULL (its header says): an
 * assertion stops the process with the reason, not a SIGSEGV. */
static void test_null_asserted(void **state) {
    (void)state;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        default_signals();
        pm_sched s;
        pm_err err;
        pm_sched_req rq = {.p = 2, .m = 4, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
        if (!freopen("/dev/null", "w", stderr) || pm_sched_generate(&s, "1f1b", &rq, &err))
            _exit(2);
        pm_sched_lower_bound(&s, NULL);
        _exit(0);
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (!WIFSIGNALED(ws) || WTERMSIG(ws) != SIGABRT)
        fail_msg("pm_sched_lower_bound(s, NULL): %s %d, not an assertion (SIGABRT)",
                 WIFSIGNALED(ws) ? "signal" : "exit", WIFSIGNALED(ws) ? WTERMSIG(ws)
                                                                        : WEXITSTATUS(ws));
}

/* ---- numbers out of range (14) --------------------------------------------------- */

static pm_cluster bad_hw;
static outcome cluster_bad_hw(void) {
    outcome o = {0};
    pm_gpt_shape g = {.layers = 2, .hidden = 8, .heads = 2, .seq = 4, .vocab = 16};
    pm_cluster_search_req rq = {.m = 2};
    pm_cluster_plan *plans = NULL;
    int n = 0;
    o.st = pm_cluster_search(&g, &bad_hw, &rq, &plans, &n, NULL, &o.err);
    pm_cluster_plans_free(plans, n);
    return o;
}
static pm_cluster_search_req bad_search;
static outcome cluster_bad_req(void) {
    outcome o = {0};
    pm_gpt_shape g = {.layers = 2, .hidden = 8, .heads = 2, .seq = 4, .vocab = 16};
    pm_cluster hw = {.devices = 2, .tflops = 1};
    pm_cluster_plan *plans = NULL;
    int n = 0;
    o.st = pm_cluster_search(&g, &hw, &bad_search, &plans, &n, NULL, &o.err);
    pm_cluster_plans_free(plans, n);
    return o;
}
static pm_sched_req bad_req;
static outcome generate_bad_req(void) {
    outcome o = {0};
    pm_sched s = {0};
    o.st = pm_sched_generate(&s, "zb-1p", &bad_req, &o.err);
    pm_sched_free(&s);
    return o;
}
static pm_train_cfg bad_cfg;
static outcome trainer_bad_cfg(void) {
    outcome o = {0};
    pm_trainer t;
    o.st = pm_trainer_init(&t, &bad_cfg, &toks, 0, &o.err);
    pm_trainer_free(&t);
    return o;
}

static void test_out_of_range_refused(void **state) {
    (void)state;
    const pm_cluster good = {.devices = 2, .mem = 1e9, .tflops = 1, .efficiency = 0.5};
    const struct {
        const char *field;
        double value;
    } hw[] = {{"hw.mem", NAN}, {"hw.mem", -1}, {"hw.tflops", NAN}, {"hw.tflops", -5},
              {"hw.efficiency", NAN}, {"hw.efficiency", -0.5}, {"hw.efficiency", 2},
              {"hw.link_gbps", NAN}, {"hw.link_gbps", -1}};
    for (size_t k = 0; k < sizeof hw / sizeof hw[0]; k++) {
        bad_hw = good;
        double *f = !strcmp(hw[k].field, "hw.mem")      ? &bad_hw.mem
                    : !strcmp(hw[k].field, "hw.tflops") ? &bad_hw.tflops
                    : !strcmp(hw[k].field, "hw.efficiency") ? &bad_hw.efficiency
                                                            : &bad_hw.link_gbps;
        *f = hw[k].value;
        char what[80];
        snprintf(what, sizeof what, "pm_cluster_search(%s %g)", hw[k].field, hw[k].value);
        expect(what, cluster_bad_hw, PM_ERR_ARG, hw[k].field);
    }
    bad_search = (pm_cluster_search_req){.m = 2, .max_mbs = -1};
    expect("pm_cluster_search(max_mbs -1)", cluster_bad_req, PM_ERR_ARG, "max_mbs");
    const pm_sched_req req = {.p = 2, .m = 4, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    bad_req = req, bad_req.mem.b = NAN;
    expect("pm_sched_generate(mem.b NaN)", generate_bad_req, PM_ERR_ARG, "mem=");
    bad_req = req, bad_req.mem_limit = -1;
    expect("pm_sched_generate(mem_limit -1)", generate_bad_req, PM_ERR_ARG, "mem_limit");
    bad_req = req, bad_req.mem_limit = NAN;
    expect("pm_sched_generate(mem_limit NaN)", generate_bad_req, PM_ERR_ARG, "mem_limit");
    bad_req = req, bad_req.time_limit = -1;
    expect("pm_sched_generate(time_limit -1)", generate_bad_req, PM_ERR_ARG, "time_limit");
    bad_cfg = tiny(), bad_cfg.opt.weight_decay = NAN;
    expect("pm_trainer_init(weight_decay NaN)", trainer_bad_cfg, PM_ERR_ARG, "opt.weight_decay");
    bad_cfg = tiny(), bad_cfg.opt.beta2 = -0.5f;
    expect("pm_trainer_init(beta2 -0.5)", trainer_bad_cfg, PM_ERR_ARG, "opt.beta2");
}

int main(void) {
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)(i * 7);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_inputs_refused),
        cmocka_unit_test(test_null_asserted),
        cmocka_unit_test(test_out_of_range_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
