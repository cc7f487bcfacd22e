/* Private to engine/comm: the receipt a rank leaves for zlua's launcher
 * (mpi_receipt.c). The launcher (lua/src/launch.c) names the folder. */
#ifndef ZL_COMM_MPI_RECEIPT_H
#define ZL_COMM_MPI_RECEIPT_H

#define ZLI_RECEIPTS_ENV "ZLUA_RANK_RECEIPTS"

/* After this process finalised MPI: when the launcher asked for receipts,
 * write "<exit status>\n" to $ZLUA_RANK_RECEIPTS/rank.<world_rank> at exit. */
void zli_mpi_receipt_arm(int world_rank);

#endif
