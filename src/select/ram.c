/* ram.c: what a sweep takes in RAM, counted before anything is allocated
 * (pm_select_ram_need), and the check against what the machine has
 * (pm_select_ram_check), a pure function so tests can give it numbers. */
#include <math.h>

#include "pipemem/pm_select.h"
#include "parts.h"

pm_status pm_select_ram_need(const pm_select_task *t, int n, const pm_select_layout *lay,
                             int devices, int spilled, pm_select_ram *out, pm_err *err) {
    double store = 0, biggest = 0;
    for (int i = 0; i < n; i++) {
        size_t b = pm_train_mem_bytes(&t[i].cfg, err);
        if (!b) return PM_ERR_ARG;
        /* parameters, gradients and the two AdamW moments */
        double state = 4.0 * sizeof(float) * (double)pm_gpt_num_params(&t[i].cfg.model);
        store += spilled ? (double)b - state : (double)b;
        biggest = fmax(biggest, state);
    }
    /* spilled, a task's state comes back whole only around an evaluation
     * or a checkpoint, on the device finishing its step: one per device */
    if (spilled) store += (devices < n ? devices : n) * biggest;
    *out = (pm_select_ram){devices, (double)pm_select_slab_bytes(lay), store, spilled};
    return PM_OK;
}

pm_status pm_select_ram_check(const pm_select_ram *need, double available, pm_err *err) {
    double G = 1 << 30, slabs = need->devices * need->slab, all = slabs + need->store;
    if (!(available > 0) || all <= available) return PM_OK;
    return pm_errf(err, PM_ERR_MEMLIMIT, "%d devices' slabs of %.3f GiB (%.2f GiB) and the "
                   "tasks' state in RAM (%.2f GiB) need %.2f GiB, but this machine has %.2f "
                   "GiB available; use fewer devices%s a smaller device_mem (smaller shards)%s",
                   need->devices, need->slab / G, slabs / G, need->store / G, all / G,
                   available / G, need->spilled ? " or" : ",",
                   need->spilled ? "" : " or set spill_dir to a directory for the state");
}
