"""torch's side of tests/interop/ops/nn.lua."""
import torch.nn as nn
import torch.nn.functional as F

CASES = {}
for red in ('mean', 'sum', 'none'):
    CASES['ce_weight_' + red] = lambda t, r=red: F.cross_entropy(t['x'], t['y'], weight=t['w'], reduction=r)
    CASES['ce_smooth_' + red] = lambda t, r=red: F.cross_entropy(t['x'], t['y'], label_smoothing=0.1, reduction=r)
    CASES['ce_weight_smooth_' + red] = lambda t, r=red: F.cross_entropy(t['x'], t['y'], weight=t['w'],
                                                                        label_smoothing=0.3, reduction=r)
CASES.update({
    'ce_weight_smooth_ignore_class': lambda t: F.cross_entropy(t['x'], t['y'], weight=t['w'], label_smoothing=0.2,
                                                               ignore_index=2),
    'ce_full_smoothing': lambda t: F.cross_entropy(t['x'], t['y'], weight=t['w'], label_smoothing=1.0),
    'ce_1d': lambda t: F.cross_entropy(t['x'], t['y'], weight=t['w'], label_smoothing=0.15),
    'ce_bf16_logits_f32_loss': lambda t: F.cross_entropy(t['x'], t['y'], weight=t['w'], label_smoothing=0.1),
    'CrossEntropyLoss_btc': lambda t: nn.CrossEntropyLoss(weight=t['w'], label_smoothing=0.25)(
        t['x'].reshape(6, 4), t['y'].reshape(6)),
    'embedding_padding_idx': lambda t: F.embedding(t['i'], t['w'], padding_idx=2),
    'embedding_padding_idx_negative': lambda t: F.embedding(t['i'], t['w'], padding_idx=-1),
    'avg_pool2d_k2': lambda t: F.avg_pool2d(t['x'], 2),
    'avg_pool2d_k3_s2_p1': lambda t: F.avg_pool2d(t['x'], 3, stride=2, padding=1),
    'avg_pool2d_k3_s2_p1_exclude_pad': lambda t: F.avg_pool2d(t['x'], 3, stride=2, padding=1,
                                                              count_include_pad=False),
    'avg_pool2d_rect': lambda t: F.avg_pool2d(t['x'], (3, 2), stride=(1, 2), padding=(1, 1),
                                              count_include_pad=False),
    'AvgPool2d': lambda t: nn.AvgPool2d(2, 1)(t['x']),
    'conv2d_groups2': lambda t: F.conv2d(t['x'], t['w'], t['b'], padding=1, groups=2),
    'conv2d_depthwise': lambda t: F.conv2d(t['x'], t['w'], stride=2, padding=1, groups=3),
    'conv2d_depthwise_multiplier': lambda t: F.conv2d(t['x'], t['w'], t['b'], groups=2),
    'conv2d_dilation2': lambda t: F.conv2d(t['x'], t['w'], t['b'], dilation=2, padding=2),
    'conv2d_dilation_stride_groups': lambda t: F.conv2d(t['x'], t['w'], t['b'], stride=(2, 1), padding=(1, 2),
                                                        dilation=(2, 3), groups=2),
    'conv2d_1x1_groups': lambda t: F.conv2d(t['x'], t['w'], groups=2),
})

# bf16 logits: the loss is computed from their values in f32 (torch's in
# f64), and their gradient rounded to bf16.
TOL = {
    'ce_bf16_logits_f32_loss': (1e-2, 1e-3),
}
