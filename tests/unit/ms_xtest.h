/* ms_xtest: the expert-store tests' fixture (test_xstore): tiny K3 experts with random bytes in
 * two safetensors files, and their locations. */
#ifndef MS_XTEST_H
#define MS_XTEST_H

#include <stdint.h>

#include "ms_expert.h"
#include "ms_st.h"
#include "ms_test.h"
#include "ms_xfmt.h"
#include "ms_xstore.h"

/* Tiny experts: w1, w3: [I, L], w2: [L, I], MXFP4. NE per layer > 8 so one call can miss
 * more experts than the deepest read queue. */
#define NL 2
#define NE 12
#define LAT 64
#define INTER 64
#define NK (NL * NE)

extern char xt_root[4096];                  /* the test's scratch folder */
extern uint8_t *xt_part_bytes[NK][6];       /* the random bytes of each expert part */
extern uint64_t xt_part_len[6];
extern int64_t xt_part_shape[6][2];
extern ms_t_rng xt_rng;

uint32_t xt_rnd(void);
const char *xt_path(const char *name);
/* The K3 expert format (MXFP4 w1 [I, L], w2 [L, I], w3 [I, L], SiTU-GLU 4, 25) at L, I. */
ms_xfmt xt_fmt(int L, int I);
uint64_t xt_bytes(int L, int I);
uint64_t xt_slot(int L, int I);
/* scattered = 0: every expert one canonical run (fillers only between experts).
 * scattered = 1: even keys have their parts in a shuffled order with fillers between. */
void xt_write_file(const char *path, int scattered);
const ms_st_tensor *xt_find_part(const ms_st *st, int key, int part);
/* Location of expert key: parts from file A (mode 0), file B (mode 1), or alternately
 * (mode 2: even parts from A, odd from B; both files hold the same bytes). */
void xt_make_loc(ms_st *const sts[2], int key, int mode, ms_xloc *loc);
int xt_contiguous(const ms_xloc *l);
/* Every expert's location in s: its parts from st (one of the two files, mode 0). */
void xt_set_all(ms_xstore *s, ms_st *st);
/* One routing: layer, rows (1-9), k (1-4), ids[rows][k], distinct within a row as a router picks
 * them, drawn from a subset of the layer's experts so they repeat across rows; z[rows][LAT]. */
void xt_random_routing(int *layer, int64_t *n_rows, int *k, int32_t *ids, float *z);
/* The fixture (xt_root set first): random expert bytes written into a.safetensors (contiguous)
 * and b.safetensors (scattered) and reopened into sts, their layouts checked, and *ref the
 * in-memory table over A's bytes. 0, or -1 after a failed check. */
int xt_fixture(ms_st *sts[2], ms_expert_table **ref);
void xt_fixture_free(ms_st *sts[2], ms_expert_table *ref);

#endif
