/* A rank started by zlua's launcher leaves a receipt as it exits: that it
 * finalised MPI, and its exit status. Open MPI 4's mpirun now and then reports
 * a rank that did both as "exiting improperly" (a race in its runtime), and
 * the launcher reads the receipts to tell that report from a real failure. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "mpi_receipt.h"

static int g_receipt_rank = -1;

/* on_exit's handler: the status is what exit() was given. */
static void write_receipt(int status, void *arg)
{
    (void)arg;
    const char *dir = getenv(ZLI_RECEIPTS_ENV);
    char path[4096], text[32];
    if (!dir || snprintf(path, sizeof path, "%s/rank.%d", dir, g_receipt_rank) >= (int)sizeof path) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    int n = snprintf(text, sizeof text, "%d\n", status);
    bool ok = write(fd, text, (size_t)n) == n;
    if (close(fd) != 0 || !ok) unlink(path);
}

void zli_mpi_receipt_arm(int world_rank)
{
    if (g_receipt_rank >= 0 || world_rank < 0 || !getenv(ZLI_RECEIPTS_ENV)) return;
    g_receipt_rank = world_rank;
    on_exit(write_receipt, NULL);
}
