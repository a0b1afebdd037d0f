/* ms_shard: moestream shard: a checkpoint's routed experts split into per-worker packs. */
#ifndef MS_SHARD_H
#define MS_SHARD_H

/* moestream shard: split the routed experts of the checkpoint in model_dir over `workers`
 * packs out_dir/worker-<i>/ (worker i owns experts [i*Ne/N, (i+1)*Ne/N) of every MoE layer,
 * and with replicas R > 1 also those of workers i-1 .. i-R+1), and write out_dir/trunk/.
 * Everything is written into a temporary directory out_dir/.shard-XXXXXX first and moved into
 * place (replacing an earlier trunk and worker-<k> packs) only when complete; on failure the
 * temporary directory is removed, out_dir too if this call created it, and an earlier pack is
 * left as it was. Progress bar on stderr when it is a terminal. Returns 0 or -1 with ms_err set
 * (MS_EXIT_IO for a full disk, naming the sizes). */
int ms_pack_shard(const char *model_dir, int workers, int replicas, const char *out_dir);

#endif
