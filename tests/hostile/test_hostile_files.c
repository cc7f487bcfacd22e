/* Hostile files for the C readers: FIFOs, device files, folders and
 * links where a file is expected, a gzip bomb, and crafted headers whose
 * shapes overflow (a zero-sized dimension beside huge ones). Each must fail
 * at once with a message naming the file; a watchdog turns a hang into a
 * failure instead of a stalled suite. */
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "harness.h"

#define WATCHDOG_S 20

static void hung(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL: a reader blocked for " "20" " s (a FIFO or device read that never ends)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(2);
    _exit(1);
}

static void watchdog(void)
{
    signal(SIGALRM, hung);
    alarm(WATCHDOG_S);
}

static const char *fifo(char *buf, size_t n, const char *name)
{
    zt_tmp_path(buf, n, name);
    unlink(buf);
    if (mkfifo(buf, 0600) != 0) zt_fail(__FILE__, __LINE__, "mkfifo %s failed", buf);
    return buf;
}

TEST(fifo_where_a_file_is_expected)
{
    watchdog();
    char p[512], want[600];
    fifo(p, sizeof p, "data.fifo");
    snprintf(want, sizeof want, "cannot read '%s': it is a FIFO (named pipe), not a regular file", p);
    zl_tensor *img = NULL, *lab = NULL;
    CHECK_ERR(zl_read_csv(p, false), want);
    CHECK_ERR(zl_read_idx(p), want);
    CHECK_ERR(zl_read_text(p), want);
    CHECK_ERR(zl_read_tokens(p, 2), want);
    CHECK_ERR(zl_read_cifar10(p, &img, &lab), want);
    CHECK(!img && !lab);
    CHECK_ERR(zl_safetensors_open(p), want);
    char *text = NULL;
    size_t len;
    uint32_t crc;
    int64_t bytes;
    CHECK_ERR(zl_fs_read_file(p, 100, false, &text, &len), want);
    CHECK_ERR(zl_fs_file_crc32(p, false, &crc, &bytes), want);
    CHECK(!text);
    alarm(0);
}

TEST(device_folder_and_link)
{
    watchdog();
    CHECK_ERR(zl_read_text("/dev/zero"), "cannot read '/dev/zero': it is a character device, not a regular file");
    CHECK_ERR(zl_safetensors_open("/dev/zero"), "cannot read '/dev/zero': it is a character device, not a regular file");
    uint32_t crc;
    int64_t bytes;
    CHECK_ERR(zl_fs_file_crc32("/dev/urandom", false, &crc, &bytes), "'/dev/urandom': it is a character device");
    char want[600];
    snprintf(want, sizeof want, "cannot read '%s': it is a folder, not a regular file", zt_tmp_dir());
    char *text;
    size_t len;
    CHECK_ERR(zl_fs_read_file(zt_tmp_dir(), 100, false, &text, &len), want);
    /* a link is followed by the data readers, refused with nofollow */
    char target[512], link[512];
    zt_tmp_path(target, sizeof target, "target.txt");
    zt_write_file(target, "abc", 3);
    zt_tmp_path(link, sizeof link, "link.txt");
    unlink(link);
    CHECK(symlink(target, link) == 0);
    zl_tensor *t = zl_read_text(link);
    CHECK(t && zl_tensor_numel(t) == 3);
    zl_tensor_release(t);
    CHECK(zl_fs_read_file(link, 100, false, &text, &len) == ZL_OK && len == 3 && !strcmp(text, "abc"));
    free(text);
    snprintf(want, sizeof want, "cannot read '%s': it is a symbolic link, not a regular file", link);
    CHECK_ERR(zl_fs_read_file(link, 100, true, &text, &len), want);
    CHECK_ERR(zl_fs_file_crc32(link, true, &crc, &bytes), want);
    /* a link to a FIFO is as a FIFO */
    char f[512];
    fifo(f, sizeof f, "behind.fifo");
    unlink(link);
    CHECK(symlink(f, link) == 0);
    snprintf(want, sizeof want, "cannot read '%s': it is a FIFO (named pipe), not a regular file", link);
    CHECK_ERR(zl_read_csv(link, false), want);
    alarm(0);
}

TEST(small_files_bounded)
{
    char p[512], want[700];
    zt_tmp_path(p, sizeof p, "big");
    char buf[2048];
    memset(buf, 'x', sizeof buf);
    zt_write_file(p, buf, sizeof buf);
    char *text;
    size_t len;
    snprintf(want, sizeof want, "'%s' is 2048 bytes, more than the 1024 such a file may have", p);
    CHECK_ERR(zl_fs_read_file(p, 1024, false, &text, &len), want);
    CHECK(zl_fs_read_file(p, 2048, false, &text, &len) == ZL_OK && len == 2048 && text[2048] == '\0');
    free(text);
    uint32_t crc;
    int64_t bytes;
    CHECK(zl_fs_file_crc32(p, true, &crc, &bytes) == ZL_OK && bytes == 2048 && crc == crc32(0, (const Bytef *)buf, 2048));
}

/* `total` zero bytes gzipped into path: deflate packs them about 1000 to 1. */
static void gzip_zeros(const char *path, size_t total)
{
    gzFile g = gzopen(path, "wb9");
    static char zeros[1 << 16];
    for (size_t done = 0; g && done < total; done += sizeof zeros)
        if (gzwrite(g, zeros, sizeof zeros) != (int)sizeof zeros) zt_fail(__FILE__, __LINE__, "gzwrite failed");
    if (g) gzclose(g);
}

TEST(gzip_bomb_refused)
{
    watchdog();
    char p[512], want[700];
    zt_tmp_path(p, sizeof p, "bomb.gz");
    gzip_zeros(p, (size_t)96 << 20);
    struct stat st;
    CHECK(stat(p, &st) == 0 && st.st_size < (1 << 20));
    snprintf(want, sizeof want, "%s: the gzip data inflates past 67108864 bytes, 64 times the file's size: refused", p);
    CHECK_ERR(zl_read_text(p), want);
    CHECK_ERR(zl_read_tokens(p, 2), want);
    zl_tensor *img, *lab;
    CHECK_ERR(zl_read_cifar10(p, &img, &lab), want);
    /* an idx header that claims the bytes the bomb gives: the claim is no licence */
    zt_tmp_path(p, sizeof p, "bomb.idx.gz");
    gzFile g = gzopen(p, "wb9");
    const unsigned char head[] = {0, 0, 0x08, 2, 0, 0, 0x60, 0, 0, 0, 0x10, 0}; /* u8 [24576, 4096]: 96 MiB */
    static char zeros[1 << 16];
    CHECK(g && gzwrite(g, head, sizeof head) == (int)sizeof head);
    for (int i = 0; g && i < 96 * 16; i++) gzwrite(g, zeros, sizeof zeros);
    if (g) gzclose(g);
    snprintf(want, sizeof want, "%s: the gzip data inflates past 67108864 bytes", p);
    CHECK_ERR(zl_read_idx(p), want);
    /* ordinary compression reads: 8 MiB of text that packs about 4 to 1 */
    zt_tmp_path(p, sizeof p, "fine.gz");
    g = gzopen(p, "wb");
    unsigned s = 1;
    char line[64];
    for (int i = 0; g && i < (8 << 20) / 16; i++) {
        s = s * 1103515245u + 12345u;
        snprintf(line, sizeof line, "%08x,%06u\n", s, (s >> 8) % 1000000u);
        gzwrite(g, line, 16);
    }
    if (g) gzclose(g);
    zl_tensor *t = zl_read_text(p);
    CHECK(t && zl_tensor_numel(t) == (8 << 20));
    zl_tensor_release(t);
    alarm(0);
}

TEST(shapes_that_overflow)
{
    /* numel 0, but the strides of the other sizes overflow 64 bits */
    CHECK_ERR(zl_tensor_new(ZL_DTYPE_F32, SHAPE(0, (int64_t)1 << 40, (int64_t)1 << 40), ZL_MEM_OTHER),
              "tensor: shape [0, 1099511627776, 1099511627776] has strides beyond a 64-bit count");
    CHECK_ERR(zl_tensor_new(ZL_DTYPE_F32, SHAPE((int64_t)1 << 40, (int64_t)1 << 40, 0), ZL_MEM_OTHER),
              "has strides beyond a 64-bit count");
    zl_tensor *ok = zl_tensor_new(ZL_DTYPE_F32, SHAPE(0, (int64_t)1 << 30, 4), ZL_MEM_OTHER);
    CHECK(ok && zl_tensor_numel(ok) == 0);
    /* the views: an empty tensor reshaped, a size-1 one expanded, past int64 */
    CHECK_ERR(zl_tensor_reshape(ok, SHAPE(0, (int64_t)1 << 40, (int64_t)1 << 40)),
              "cannot reshape a tensor of shape [0, 1073741824, 4] (0 elements) into [0, 1099511627776, 1099511627776]");
    CHECK_ERR(zl_tensor_view(ok, SHAPE((int64_t)1 << 40, 0, (int64_t)1 << 40)), "cannot reshape");
    zl_tensor_release(ok);
    zl_tensor *one = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(1));
    CHECK_ERR(zl_tensor_expand(one, SHAPE((int64_t)1 << 40, (int64_t)1 << 40)),
              "expand: cannot expand shape [1] to [1099511627776, 1099511627776]");
    zl_tensor *wide = zl_tensor_expand(one, SHAPE((int64_t)1 << 40, 1));
    CHECK(wide && zl_tensor_numel(wide) == (int64_t)1 << 40);
    zl_tensor_release(wide);
    zl_tensor_release(one);
    /* an idx file: dims [0, 2^32-1, 2^32-1, 2^32-1], no data */
    char p[512], want[700];
    zt_tmp_path(p, sizeof p, "zero.idx");
    const unsigned char idx[] = {0, 0, 0x08, 4, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255};
    zt_write_file(p, idx, sizeof idx);
    snprintf(want, sizeof want, "%s: idx dims [0, 4294967295, 4294967295, 4294967295] at offset 4", p);
    CHECK_ERR(zl_read_idx(p), want);
    /* a safetensors header: shape [0, 2^40, 2^40], no bytes */
    zt_tmp_path(p, sizeof p, "zero.safetensors");
    const char *h = "{\"t\":{\"dtype\":\"F32\",\"shape\":[0,1099511627776,1099511627776],\"data_offsets\":[0,0]}}";
    unsigned char file[256];
    uint64_t hl = strlen(h);
    for (int k = 0; k < 8; k++) file[k] = (unsigned char)(hl >> (8 * k));
    memcpy(file + 8, h, hl);
    zt_write_file(p, file, 8 + hl);
    snprintf(want, sizeof want, "%s: tensor 't' has shape [0, 1099511627776, 1099511627776]", p);
    CHECK_ERR(zl_safetensors_open(p), want);
}
