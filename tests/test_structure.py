"""The tree keeps the shape docs/architecture.md describes (tools/structure.py measures it)."""

from __future__ import annotations

from tools import structure


def test_given_the_tree_then_no_package_circle_no_upward_edge_and_no_long_function():
    # Given every module's own imports, when the graph is drawn, then no trainium_eks package or
    # module reaches back to itself, no layer imports one above it, and no function runs over 80
    # lines
    modules = structure.modules()
    edges = structure.edges(modules)
    assert len(modules) > 150 and len(edges) > 600  # the tree was read
    assert structure.circles(edges) == []
    assert structure.module_circles(edges) == []
    assert structure.upward(edges) == []
    assert structure.long_functions(modules) == []


def test_given_an_edge_up_the_layers_or_back_between_packages_then_it_is_found():
    edges = {
        ("trainium_job.spec", "training.trainer.cli"),
        ("trainium_eks.nodes.karpenter", "trainium_eks.addons.registry"),
        ("trainium_eks.addons.registry", "trainium_eks.nodes.node_pool"),
        ("stacks.platform_stack", "trainium_eks.platform"),
    }
    assert structure.upward(edges) == [("trainium_job.spec", "training.trainer.cli")]
    assert structure.circles(edges) == ["trainium_eks.addons", "trainium_eks.nodes"]
    same_package = {("trainium_job.plan", "trainium_job.spec"), ("trainium_job.spec", "trainium_job.plan")}
    assert structure.circles(same_package) == []
    assert structure.module_circles(same_package) == ["trainium_job.plan", "trainium_job.spec"]
