/* config.h: the training configuration's fields by name, their rules, the
 * check and the comparison (config.c), private to the library: the sweep's
 * space reads a tasks file's values through them and a checkpoint's run is
 * compared with them; pm_train.h builds a configuration. */
#ifndef PM_TRAIN_CONFIG_H
#define PM_TRAIN_CONFIG_H

#include <stddef.h>

#include "pipemem/pm_train.h"

/* Each field's name as messages give it ("model.vocab", ..., "batch",
 * "micro", "seed", "opt.lr", ...: pm_util.h), and what a value of it must
 * be ("an integer 1..16777216", "a positive number up to 3.4e38 (a float)"). */
extern const char *const pm_train_field_names[PM_CFG_FIELDS];
extern const char *const pm_train_value_rules[PM_CFG_FIELDS];
/* 1 if x is a value field f takes (its rule). */
int pm_train_value_ok(pm_train_field f, double x);

/* Whether c can be trained: the model (pm_gpt_config_check), every other
 * field within its rule (the seed takes any 64 bits), micro dividing
 * batch, the warm-up at most the steps; else PM_ERR_ARG naming the field. */
pm_status pm_train_cfg_check(const pm_train_cfg *c, pm_err *err);

/* The first field among mask's (PM_CFG_BIT(f) each, PM_CFG_ALL every one),
 * in pm_train_field order, whose value differs in a and b; -1 if none. */
int pm_train_cfg_diff(const pm_train_cfg *a, const pm_train_cfg *b, unsigned mask);
/* Field f of c as text: an integer in decimal, a float as pm_float_text. */
void pm_train_cfg_value(const pm_train_cfg *c, pm_train_field f, char *buf, size_t cap);

#endif
