"""The recipe library: one module per executable local strategy, registered here by key."""

from __future__ import annotations

from htam_graph.rules.base import Recipe
from htam_graph.rules.compose import ComposedKernels
from htam_graph.rules.recipes.channels_last_conv import ChannelsLastConv
from htam_graph.rules.recipes.conv_reduce import ConvReduction
from htam_graph.rules.recipes.conv_transpose_rewrite import ConvTransposeAsConv
from htam_graph.rules.recipes.depthwise_conv import DepthwiseConvDirect
from htam_graph.rules.recipes.elementwise_chain import ElementwiseChain
from htam_graph.rules.recipes.gemm_row_epilogue import GemmRowEpilogue
from htam_graph.rules.recipes.library_epilogue import LibraryEpilogue
from htam_graph.rules.recipes.loss_reduction import PointwiseIntoReduction
from htam_graph.rules.recipes.norm_fused import SinglePassNorm
from htam_graph.rules.recipes.pool_window import PoolWindow
from htam_graph.rules.recipes.precision_tf32 import tf32_recipes
from htam_graph.rules.recipes.reduce_dim import DimReduction
from htam_graph.rules.recipes.rewrite_diag_matmul import DiagMatmulAsBroadcast
from htam_graph.rules.recipes.rewrite_noops import DropNoops
from htam_graph.rules.recipes.rewrite_reduce_linear import ReduceBeforeLinear
from htam_graph.rules.recipes.row_softmax import RowSoftmax
from htam_graph.rules.recipes.scan import BlockScan
from htam_graph.rules.recipes.softmax_dim import OnlineLogsumexp
from htam_graph.rules.recipes.tuning import TuningRecipe, tuning_recipes

__all__ = ["base_recipes", "default_recipes", "TuningRecipe"]


def base_recipes() -> dict[str, Recipe]:
    """Recipes that write a kernel from the task alone, by local key (in preference order)."""
    recipes: list[Recipe] = [ElementwiseChain(), LibraryEpilogue(), RowSoftmax()]
    recipes += [PoolWindow(), DiagMatmulAsBroadcast()]
    recipes.append(DropNoops([ElementwiseChain(), LibraryEpilogue(), PoolWindow()]))
    recipes += [SinglePassNorm(), DimReduction(), OnlineLogsumexp()]
    recipes += [PointwiseIntoReduction(), BlockScan()]
    recipes.append(ChannelsLastConv())
    recipes.append(GemmRowEpilogue())
    recipes.append(ReduceBeforeLinear())
    recipes.append(ConvReduction())
    recipes.append(ConvTransposeAsConv())
    recipes.append(DepthwiseConvDirect())
    recipes.append(ComposedKernels())  # the general fallback: composed from the forward's ops
    return {r.key: r for r in recipes}


def default_recipes() -> dict[str, Recipe | TuningRecipe]:
    """Every recipe, by local key: the base recipes, then the tuning recipes over them."""
    bases = base_recipes()
    registry: dict[str, Recipe | TuningRecipe] = dict(bases)
    registry.update({t.key: t for t in tuning_recipes(bases)})
    registry.update({r.key: r for r in tf32_recipes()})  # precision track: apply only under the tf32 policy
    return registry
