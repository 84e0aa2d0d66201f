"""The add-on registry: every add-on module is in it, each declaration is whole, and
TrainiumAddons builds what it lists."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import trainium_eks.addons as addons_package
from trainium_eks.addons import registry
from trainium_eks.addons.addon import POD_IDENTITY_AGENT, SYSTEM_NODES, TRAINIUM_CAPACITY, AddOn
from trainium_eks.addons.trainium_addons import TrainiumAddons
from trainium_eks.compatibility import PINS
from trainium_eks.config import PlatformSettings
from trainium_eks.versions import KUBERNETES_RELEASES

#: The package's modules that are machinery, not an add-on.
NOT_ADDONS = {"addon", "registry", "trainium_addons", "node_daemons"}


def addon_modules(addons: tuple[AddOn, ...]) -> dict[str, AddOn | None]:
    """Every module of trainium_eks.addons (walked, not listed) but the machinery -> its ADDON."""
    found = {}
    for info in pkgutil.iter_modules(addons_package.__path__):
        if info.name not in NOT_ADDONS:
            module = importlib.import_module(f"{addons_package.__name__}.{info.name}")
            found[info.name] = getattr(module, "ADDON", None)
    return found


def left_out(addons: tuple[AddOn, ...]) -> list[str]:
    """The add-on modules whose declaration is missing or not in ``addons``."""
    return [name for name, addon in addon_modules(addons).items() if addon is None or addon not in addons]


def test_given_the_package_then_every_addon_module_declares_an_addon_in_the_registry():
    assert left_out(registry.ADDONS) == []
    assert len(registry.ADDONS) == len(addon_modules(registry.ADDONS)) == len(set(registry.ADDONS))


def test_given_an_addon_dropped_from_the_registry_then_it_is_found_left_out():
    without_etcd = tuple(a for a in registry.ADDONS if a.name != "etcd")
    assert left_out(without_etcd) == ["etcd"]


def test_given_each_declaration_then_its_key_is_a_platform_setting_and_its_pins_are_pinned():
    settings = {f.name for f in dataclasses.fields(PlatformSettings)}
    for addon in registry.ADDONS:
        assert addon.key is None or addon.key in settings, addon.name
        assert addon.pins and all(PINS[key] is pin for key, pin in addon.pins.items()), addon.name


def test_given_each_chart_of_an_addon_then_it_declares_every_kubernetes_release():
    # A chart's own declaration for each version this library builds (an EKS managed add-on may
    # lack one: no evidence that EKS offers it there, tests/trainium_eks/config/test_config_addons.py).
    charts = [(a.name, key, pin) for a in registry.ADDONS for key, pin in a.pins.items() if pin.repository]
    assert {key for _, key, _ in charts} == {"neuron", "efa", "volcano", "kube-prometheus-stack"}
    for name, key, pin in charts:
        assert set(pin.compatibility) == set(KUBERNETES_RELEASES), (name, key)
        assert all(len(cell.source) > 30 for cell in pin.compatibility.values()), (name, key)


def test_given_the_order_then_each_addon_comes_after_only_nodes_or_earlier_addons():
    earlier: set[str] = set()
    for addon in registry.ADDONS:
        for after in addon.after:
            assert after in {SYSTEM_NODES, TRAINIUM_CAPACITY} | earlier or (
                after == POD_IDENTITY_AGENT and "observability" in earlier
            ), (addon.name, after)
        earlier.add(addon.name)


def test_given_the_typed_attributes_of_trainium_addons_then_each_is_an_addon_or_its_own_result():
    # TrainiumAddons sets every add-on as the attribute of its name; the typed ones (for a type
    # checker) must name a registered add-on, or one of the two results it derives, so none goes
    # stale when an add-on is renamed or removed.
    annotated = set(TrainiumAddons.__annotations__)
    assert annotated - {addon.name for addon in registry.ADDONS} == {"queue_name", "etcd_endpoint"}
