"""Name -> op-tag tables used by `optags` (module classes by class name, functions by their last name)."""

from __future__ import annotations

_ACT = frozenset({"activation", "elementwise"})


def _table(spec: dict[str, tuple[str, ...]]) -> dict[str, frozenset[str]]:
    """Expand {"name1 name2": tags} into {name: frozenset(tags)}."""
    return {name: frozenset(tags) for names, tags in spec.items() for name in names.split()}


MODULE_TAGS: dict[str, frozenset[str]] = _table(
    {
        "Linear Bilinear LazyLinear": ("matmul",),
        "Conv1d Conv2d Conv3d LazyConv1d LazyConv2d LazyConv3d": ("conv",),
        "ConvTranspose1d ConvTranspose2d ConvTranspose3d": ("conv_transpose",),
        "ReLU ReLU6 LeakyReLU GELU Sigmoid Tanh Hardtanh Mish Softplus ELU SELU CELU Hardswish Hardsigmoid "
        "Softsign SiLU PReLU RReLU Tanhshrink Softshrink Hardshrink LogSigmoid Threshold GLU": tuple(_ACT),
        "Softmax LogSoftmax Softmin Softmax2d": ("softmax",),
        "LayerNorm BatchNorm1d BatchNorm2d BatchNorm3d InstanceNorm1d InstanceNorm2d InstanceNorm3d "
        "GroupNorm "
        "RMSNorm LocalResponseNorm SyncBatchNorm": ("norm",),
        "MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool1d AdaptiveAvgPool2d "
        "AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d LPPool1d LPPool2d "
        "FractionalMaxPool2d FractionalMaxPool3d MaxUnpool1d MaxUnpool2d MaxUnpool3d": ("pooling",),
        "CosineSimilarity": ("loss",),
        "MultiheadAttention": ("attention", "matmul", "softmax"),
        "TransformerEncoderLayer TransformerDecoderLayer Transformer": (
            "attention",
            "matmul",
            "softmax",
            "norm",
            "activation",
            "elementwise",
        ),
        "LSTM GRU RNN LSTMCell GRUCell RNNCell": ("rnn",),
        "Embedding EmbeddingBag": ("indexing",),
    }
)

# Every *Loss class is a loss (matched by suffix in optags); these functions are too.
FUNCTION_TAGS: dict[str, frozenset[str]] = _table(
    {
        "matmul mm bmm mv einsum linear addmm baddbmm addbmm addmv tensordot dot outer inner bilinear": (
            "matmul",
        ),
        "conv1d conv2d conv3d": ("conv",),
        "conv_transpose1d conv_transpose2d conv_transpose3d": ("conv_transpose",),
        "relu relu6 gelu sigmoid tanh leaky_relu hardtanh mish softplus elu selu celu hardswish hardsigmoid "
        "softsign silu swish logsigmoid hardshrink softshrink tanhshrink threshold prelu rrelu glu": tuple(
            _ACT
        ),
        "clamp clamp_min clamp_max clip exp exp2 log log2 log10 log1p expm1 sqrt rsqrt abs pow neg add sub "
        "mul div "
        "where maximum minimum sign floor ceil round trunc reciprocal erf erfc sin cos square lerp addcmul "
        "addcdiv "
        "true_divide fmod remainder sub subtract multiply divide": ("elementwise",),
        "sum mean prod argmax argmin logsumexp amax amin std var all any median nansum nanmean "
        "count_nonzero": ("reduction",),
        "cumsum cumprod cummax cummin logcumsumexp": ("reduction", "scan"),
        "softmax log_softmax softmin": ("softmax",),
        "layer_norm batch_norm instance_norm group_norm rms_norm normalize local_response_norm norm "
        "vector_norm": ("norm",),
        "max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d "
        "adaptive_avg_pool2d "
        "adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d lp_pool1d lp_pool2d "
        "max_unpool1d max_unpool2d max_unpool3d": ("pooling",),
        "mse_loss cross_entropy kl_div smooth_l1_loss huber_loss hinge_embedding_loss triplet_margin_loss "
        "cosine_similarity cosine_embedding_loss nll_loss binary_cross_entropy "
        "binary_cross_entropy_with_logits "
        "l1_loss margin_ranking_loss multi_margin_loss soft_margin_loss poisson_nll_loss gaussian_nll_loss "
        "ctc_loss "
        "triplet_margin_with_distance_loss multilabel_margin_loss": ("loss",),
        "scaled_dot_product_attention multi_head_attention_forward": ("attention",),
        "lstm gru rnn_tanh rnn_relu lstm_cell gru_cell": ("rnn",),
        "expand expand_as broadcast_to broadcast_tensors": ("broadcast",),
        "gather scatter scatter_add scatter_reduce index_select index_add index_copy index_fill index_put "
        "take "
        "take_along_dim triu tril diag diagonal diag_embed masked_fill masked_select masked_scatter narrow "
        "select "
        "embedding one_hot nonzero": ("indexing",),
    }
)

# Calls whose result feeds a normalisation when a tensor is divided by it (x / x.norm(), x / sqrt(mean(x^2))).
REDUCTIONS: frozenset[str] = frozenset(
    {"sum", "mean", "norm", "std", "var", "amax", "amin", "logsumexp", "vector_norm", "max", "min"}
)
