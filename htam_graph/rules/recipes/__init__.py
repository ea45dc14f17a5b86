"""The recipe library, registered here by key: one subpackage per family of executable local strategies.

Each family holds its recipe (`recipe.py`, or one module per recipe) with the plan and the emitters it needs:
elementwise/, rewrites/, reduce/, norms/, scans/, losses/, gemm_row/, pooling/, conv_reduce/, conv_transpose/,
depthwise/, channels_last/, tensor_core/ (and rules/compose/, the composed fallback). tuning.py re-emits a
base recipe's kernel with another launch configuration.
"""

from __future__ import annotations

from htam_graph.rules.base import Recipe
from htam_graph.rules.compose import ComposedKernels
from htam_graph.rules.recipes.channels_last.recipe import ChannelsLastConv
from htam_graph.rules.recipes.conv_reduce.recipe import ConvReduction
from htam_graph.rules.recipes.conv_transpose.recipe import ConvTransposeAsConv
from htam_graph.rules.recipes.depthwise.recipe import DepthwiseConvDirect
from htam_graph.rules.recipes.elementwise.chain import ElementwiseChain
from htam_graph.rules.recipes.elementwise.library_epilogue import LibraryEpilogue
from htam_graph.rules.recipes.elementwise.tf32 import tf32_recipes
from htam_graph.rules.recipes.gemm_row.recipe import GemmRowEpilogue
from htam_graph.rules.recipes.losses.recipe import PointwiseIntoReduction
from htam_graph.rules.recipes.norms.row_softmax import RowSoftmax
from htam_graph.rules.recipes.norms.single_pass import SinglePassNorm
from htam_graph.rules.recipes.pooling.recipe import PoolWindow
from htam_graph.rules.recipes.reduce.dim import DimReduction
from htam_graph.rules.recipes.reduce.logsumexp import OnlineLogsumexp
from htam_graph.rules.recipes.rewrites.diag_matmul import DiagMatmulAsBroadcast
from htam_graph.rules.recipes.rewrites.noops import DropNoops
from htam_graph.rules.recipes.rewrites.reduce_linear import ReduceBeforeLinear
from htam_graph.rules.recipes.scans.block_scan import BlockScan
from htam_graph.rules.recipes.tensor_core.recipe import TensorCoreGemm
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
    recipes.append(TensorCoreGemm())
    recipes.append(ComposedKernels())  # the general fallback: composed from the forward's ops
    return {r.key: r for r in recipes}


def default_recipes() -> dict[str, Recipe | TuningRecipe]:
    """Every recipe, by local key: the base recipes, then the tuning recipes over them."""
    bases = base_recipes()
    registry: dict[str, Recipe | TuningRecipe] = dict(bases)
    registry.update({t.key: t for t in tuning_recipes(bases)})
    registry.update({r.key: r for r in tf32_recipes()})  # precision track: apply only under the tf32 policy
    return registry
