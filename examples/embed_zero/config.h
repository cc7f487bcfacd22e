/* The part of a DeepSpeed config embed_zero reads (config.c). */
#ifndef EMBED_ZERO_CONFIG_H
#define EMBED_ZERO_CONFIG_H
#include <zlua/zlua.h>

typedef struct example_config {
    zl_zero_config zero;
    zl_zero_hparams hp;
    int64_t micro_batch, gas;
    double clip;
    char nvme_opt[4096], nvme_param[4096];   /* the paths zero.offload_*.nvme_path point at */
} example_config;

/* 0 on success; otherwise err names the file and the key. */
int example_config_load(const char *path, int world, example_config *c, char *err, size_t errn);

#endif
