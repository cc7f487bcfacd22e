/* Private to the zlua executable: the launcher (launch.c), which runs a script
 * as several ranks through Open MPI's mpirun, and the rank variables every
 * zlua process sets for its script at start. */
#ifndef ZLX_LAUNCH_H
#define ZLX_LAUNCH_H

#include <stdbool.h>

/* The launcher's options as given; NULL or 0 when absent. */
typedef struct zlx_launch {
    int nprocs;            /* --nprocs N */
    const char *hostfile;  /* --hostfile FILE, DeepSpeed's `host slots=N` lines */
    const char *include;   /* --include NODE[:slot,slot]@NODE... */
    const char *exclude;   /* --exclude, same syntax */
    bool bind_cores;       /* --bind_cores_to_rank */
    int num_gpus;          /* --num_gpus N (--num_accelerators): ranks per host */
    int num_nodes;         /* --num_nodes N: the first N hosts of the hostfile */
    const char *master_addr;  /* --master_addr, MASTER_ADDR of every rank */
    const char *master_port;  /* --master_port, MASTER_PORT of every rank */
} zlx_launch;

/* If argv[*i] is a launcher option, reads it and its value (advancing *i past
 * the value) into l and returns 1; returns 0 for any other argument, and -1
 * with a message on stderr when the value is missing or bad. */
int zlx_launch_option(int argc, char **argv, int *i, zlx_launch *l);

/* Whether the command line asked for the launcher (any of its options). */
bool zlx_launch_wanted(const zlx_launch *l);

/* Runs argv, less the launcher's options, as ranks under mpirun and waits for
 * them; end is the argv index of the script (argc when there is none).
 * Returns the exit status for main: mpirun's, or EXIT_FAILURE with a message
 * on stderr when the options conflict, the hostfile is bad or mpirun is
 * missing. */
int zlx_launch_ranks(const zlx_launch *l, int argc, char **argv, int end);

/* Sets RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_SIZE from Open MPI's
 * OMPI_COMM_WORLD_* variables where those are set and the plain ones are not,
 * so a script started by plain mpirun sees what the launcher gives it. */
void zlx_launch_rank_env(void);

#endif
