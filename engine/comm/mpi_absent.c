/* The "mpi" backend of a build configured without MPI (CMake compiles this
 * file instead of mpi.c): only its name and why it is missing, so asking for
 * it fails with a message saying how to get it. */
#include "backend.h"
#include "zlua/comm.h"

const zli_comm_backend zli_comm_mpi = {
    .name = "mpi",
    .missing = "zlua was built without MPI (configured with -DZLUA_MPI=OFF or found none): "
               "install libopenmpi-dev and openmpi-bin, then reconfigure and rebuild",
};

/* Without MPI there are no peers to read a note. */
void zl_comm_note_failure(const char *message) { (void)message; }
