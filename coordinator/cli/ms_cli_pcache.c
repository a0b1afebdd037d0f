/* ms_cli_pcache: the prefix-cache options shared by jobs and serve. */
#include <stdio.h>

#include "ms_cli.h"
#include "ms_cli_pcache.h"
#include "ms_err.h"
#include "ms_ident.h"
#include "ms_opt.h"
#include "ms_proc.h"
#include "ms_size.h"

int ms_cli_pc_take(ms_cli_pcopts *o, const char *cmd, int c, const char *arg, int *code)
{
    int bad = 0;
    switch (c) {
    case 0x7063:
        bad = ms_opt_size("--prefix-cache", arg, &o->ram);
        o->ram_set = 1;
        break;
    case 0x7066: o->off = 1; break;
    case 0x7064: o->dir = arg; break;
    case 0x7065: bad = ms_opt_size("--state-cache-size", arg, &o->disk); break;
    default: return 0;
    }
    if (bad) {
        *code = ms_cli_fail_err(cmd);
        return -1;
    }
    if (o->off && (o->ram_set || o->dir)) {
        *code = ms_cli_fail(cmd, MS_EXIT_USAGE, "--no-prefix-cache goes with neither --prefix-cache nor --state-cache");
        return -1;
    }
    return 1;
}

ms_engine *ms_cli_pc_engine_open(ms_cli_pcopts *o, int by_default, uint64_t budget, const char *cmd, ms_engine_opts *eo)
{
    int dflt = by_default && !o->off && !o->ram_set;
    if (dflt) {
        uint64_t b = budget ? budget : ms_proc_mem_available(), share = b / 16;
        o->ram = share > (4ull << 30) ? 4ull << 30 : share;
    }
    if (o->off) o->ram = 0;
    eo->run.state_cache = o->ram;
    ms_engine *e = ms_engine_open(eo);
    if (!e && dflt && o->ram && ms_err_code() == MS_EXIT_BUDGET) {
        ms_log(1, "%s: the budget cannot spare the default prefix cache (%s): going on without one", cmd, ms_err_msg());
        o->ram = 0;
        eo->run.state_cache = 0;
        e = ms_engine_open(eo);
    }
    return e;
}

ms_pcache *ms_cli_pc_open(const ms_cli_pcopts *o, uint64_t pinned_room, ms_engine *e, const char *model_dir,
                          const char *cmd, int *code)
{
    *code = 0;
    if (!o->ram && !o->dir && !pinned_room) return NULL;
    char fp[17] = "";
    if (o->dir && ms_ident_model(model_dir, fp) != 0) { /* files outlive the run: they must say whose they are */
        *code = ms_cli_fail_err(cmd);
        return NULL;
    }
    ms_pcache *c = ms_pcache_new(ms_engine_model(e), o->ram, o->dir, o->disk ? o->disk : 10ull << 30,
                                 ms_engine_family(e)->name, fp);
    if (!c) *code = ms_cli_fail_err(cmd);
    else ms_pcache_set_pin_room(c, pinned_room);
    return c;
}

void ms_cli_pc_summary(const ms_pcache *c, char *buf, size_t n)
{
    ms_pcache_stats st;
    ms_pcache_get_stats(c, &st);
    char a[32], b[32];
    snprintf(buf, n,
             "prefix cache: %llu of %llu prompts started from a kept state, %llu prompt tokens not prefilled; %llu "
             "states in RAM (%s), %llu on disk (%s), %llu spilled, %llu evicted",
             (unsigned long long)st.hits, (unsigned long long)st.lookups, (unsigned long long)st.tokens_reused,
             (unsigned long long)st.entries_ram, ms_size_fmt(st.bytes_ram, a, sizeof a),
             (unsigned long long)st.entries_disk, ms_size_fmt(st.bytes_disk, b, sizeof b), (unsigned long long)st.spills,
             (unsigned long long)st.evictions);
}
