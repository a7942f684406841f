/* train_opts.h: the options of `pipemem train`, one set for both modes:
 * single device (cmd_train.c) and the pipeline runtime (cmd_train_pp.c,
 * chosen by --pp, --schedule or --schedule-file). One parser, one help
 * text, so the two modes cannot drift apart in defaults or meaning. */
#ifndef PM_CLI_TRAIN_OPTS_H
#define PM_CLI_TRAIN_OPTS_H

#include <stdint.h>

#include "cli.h"
#include "curves.h"
#include "pipemem/pm_data.h"
#include "pipemem/pm_plan.h"
#include "pipemem/pm_train.h"

typedef struct {
    /* both modes */
    const char *data, *save, *resume;
    const char *curves; /* --curves FILE.svg: the losses against the step */
    const char *train_file, *val_file; /* --train FILE --val FILE instead of --data DIR */
    int pad_vocab;  /* --pad-vocab N: the model's vocabulary rounded up to a multiple */
    pm_train_settings set; /* --layers ... --seed: the configuration's settings */
    pm_train_cfg cfg;      /* made from them (pm_train_cfg_make; vocab: the defaults') */
    int eval_every, eval_batches;
    int stop_after; /* stop after this step as if interrupted (0: run to --steps) */
    int json;
    int threads; /* BLAS threads: --threads (single device) or 1 (pipeline) */
    /* pipeline (--pp, --schedule, --schedule-file set pipeline) */
    int pipeline, pp, chunks;
    int have_pp; /* --pp was given (a schedule file must then agree with it) */
    int have_kind; /* --schedule was given (refused beside --schedule-file) */
    int recompute; /* --recompute: the schedule's stages recompute in B */
    const char *kind, *sched_file, *trace, *svg;
    double mem_limit;
    int dp;                /* --dp: data-parallel replicas of the pipeline */
    const char *transport; /* --transport threads|mpi; NULL: mpi when mpirun started us */
    const char *placement; /* --placement flops|measured|memory; NULL: flops */
    int head_parts;        /* --head-parts N; 0: chosen by the placement */
    size_t device_mem;     /* --device-mem SIZE: one device's budget in bytes; 0: none */
    int zero;              /* --zero 1: ZeRO stage 1 across the --dp replicas */
    double comm_timeout;   /* --comm-timeout S: a device's wait for another; 0: 120 s */
} pm_cli_train_opts;

/* Parses argv[1..]: 0 on success, 1 on error (one line printed), -1 after
 * printing the help for --help. Defaults are filled in (the configuration,
 * eval_every). */
int pm_cli_train_parse(int argc, char **argv, pm_cli_train_opts *o);

/* Before any work: every output path (--save, --trace, --timeline) can be
 * written (and the temporaries of a killed run are cleared); that none is
 * an input or another output the parser checked (pm_cli_parse). On error
 * prints one line naming the path and returns 1. */
int pm_cli_train_check_outputs(const pm_cli_train_opts *o);

/* --resume's checkpoint checked whole before anything is printed or
 * allocated (pm_ckpt_verify): its checksums, this run's model and data
 * (tr), and its learning-rate schedule (--steps, --warmup). On error
 * prints one line, returns 1. */
int pm_cli_train_check_resume(const pm_cli_train_opts *o, const pm_tokens *tr);

/* The step a run stops after: --stop-after if it comes first, else
 * --steps (the cosine still spans --steps). */
int64_t pm_cli_train_stop_at(const pm_cli_train_opts *o, const pm_train_cfg *cfg);

/* The training configuration the options describe (o->cfg), with the
 * vocabulary of the train tokens. */
void pm_cli_train_cfg(const pm_cli_train_opts *o, const pm_tokens *tr, pm_train_cfg *cfg);

/* DIR/NAME into buf (n bytes), one slash between them however DIR ends
 * ("d/"); returns buf. */
const char *pm_cli_in_dir(char *buf, size_t n, const char *dir, const char *name);

/* Reads DIR/train.bin and DIR/val.bin; on error prints, frees both, returns 1. */
int pm_cli_train_load(const char *dir, pm_tokens *tr, pm_tokens *va);
/* The same for train's options: --data DIR, or --train FILE --val FILE
 * (token files of any format, llm.c's among them). */
int pm_cli_train_data(const pm_cli_train_opts *o, pm_tokens *tr, pm_tokens *va);

/* Checks both splits (read from files tn and vn) hold a window of ctx + 1
 * tokens; else prints one line, who (a prefix) and the file, and returns 1. */
int pm_cli_splits_fit(const char *who, const char *tn, const char *vn, int ctx,
                      const pm_tokens *tr, const pm_tokens *va);
/* The same for train's splits, named as the user gave them. */
int pm_cli_train_check_ctx(const pm_cli_train_opts *o, int ctx, const pm_tokens *tr,
                           const pm_tokens *va);

/* Checks both splits fit the context, initialises the trainer and,
 * with --resume, loads the checkpoint into it. On error prints one line,
 * leaves *t freed and returns 1. */
int pm_cli_train_start(const pm_cli_train_opts *o, const pm_train_cfg *cfg, const pm_tokens *tr,
                       const pm_tokens *va, pm_trainer *t);

/* The data directory's tokenizer.model into t (its checkpoints embed it),
 * checked against the checksum train.bin records; prints and returns 1 on
 * error. */
int pm_cli_data_tokenizer(const char *dir, const pm_tokens *tr, pm_trainer *t);
/* The same model's bytes (*model from pm_malloc; NULL for byte data is the
 * caller's case: call it only when tr->tokenizer is set). */
int pm_cli_read_tokenizer(const char *dir, const pm_tokens *tr, char **model, size_t *len);

/* Prints the JSON fields both modes share, from "{" to the "ctx" field
 * without the closing brace; sorts times (the step wall times, n of them). */
void pm_cli_train_json_head(const pm_cli_train_opts *o, const pm_train_cfg *c, int64_t step,
                            double *times, int n, double final_loss, double val_loss);

/* --curves (both modes): the run's curve, from the step it starts at to
 * --steps, kept from the loop's events and written when it is over. init
 * and write return 0 or 1 (printed); nothing is recorded or written
 * without --curves. */
int pm_cli_train_curves_init(const pm_cli_train_opts *o, int64_t start, int64_t steps,
                             pm_cli_curves *cv);
void pm_cli_train_curves_event(pm_cli_curves *cv, const pm_loop_event *ev);
int pm_cli_train_curves_write(const pm_cli_train_opts *o, const pm_cli_curves *cv);

/* `pipemem train` in pipeline mode (cmd_train_pp.c). */
int pm_cli_train_pp(const pm_cli_train_opts *o);

#endif
