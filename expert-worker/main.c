/* moestream-worker: the expert worker (serves routed experts over ZeroMQ; see issue 4). */
#include <stdio.h>
#include <string.h>

#include "ms_err.h"

static void usage(FILE *f)
{
    fputs("usage: moestream-worker (--model DIR | --pack DIR) --listen ENDPOINT [--ram-budget SIZE]\n"
          "                        [--experts SPEC] [--curve-secret FILE --allow FILE | --insecure]\n"
          "\n"
          "Serves routed-expert computations to a moestream coordinator over ZeroMQ.\n"
          "Not implemented in this version: the coordinator computes experts in-process.\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return MS_EXIT_OK;
    }
    usage(stderr);
    fprintf(stderr, "moestream-worker: the expert worker is not implemented yet\n");
    return MS_EXIT_USAGE;
}
