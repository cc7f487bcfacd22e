/* Private to engine/io: every file the engine reads is opened here, and only
 * when it is a regular file. A FIFO would block the open or the first read
 * for ever, a device file (/dev/zero) never ends, and opening some devices
 * has effects of its own, so the kind is checked before the open (without
 * following a last symlink when asked) and again on the open descriptor. */
#ifndef ZL_IO_REGULAR_H
#define ZL_IO_REGULAR_H

#include "../core/tensor_impl.h"

/* Refuse a symlink as the last component (checkpoint files: only the files
 * inside the folder, never one a link points at). */
#define ZLI_OPEN_NOFOLLOW 1u

/* Open `path` read-only into *fd, blocking reads, close-on-exec. Errors name
 * the path: "cannot open '<path>': <strerror>", "cannot read '<path>': it is
 * a FIFO (named pipe), not a regular file" (likewise a folder, a character or
 * block device, a socket, or with ZLI_OPEN_NOFOLLOW a symbolic link). *size
 * (when not NULL) gets the file's size in bytes. */
ZLI_HIDDEN zl_status zli_open_regular(const char *path, unsigned flags, int *fd, int64_t *size);

/* Each of zlua/io.h's file-system calls and the safetensors writer's first
 * calls this: a count, and the process killed where zl_fs_kill_after says. */
ZLI_HIDDEN void zli_fs_step(void);

#endif
