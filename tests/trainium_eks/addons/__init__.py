"""Tests of trainium_eks.addons, and helpers they share with the schema test."""

from __future__ import annotations

from typing import Any

from tests.support import ALL_OPTIONS, helm_charts, k8s_manifests

__all__ = ["ALL_OPTIONS", "chart", "depends_on", "logical_ids", "nodegroup_id", "objects"]


def chart(template: dict[str, Any], release: str) -> tuple[str, dict[str, Any]]:
    """(logical id, properties) of the Helm release named ``release``."""
    (found,) = [(k, p) for k, p in helm_charts(template).items() if p["Release"] == release]
    return found


def objects(template: dict[str, Any], kind: str) -> list[tuple[str, dict[str, Any]]]:
    """(logical id, object) of every applied Kubernetes object of ``kind``."""
    return [(k, o) for k, o in k8s_manifests(template) if o["kind"] == kind]


def depends_on(template: dict[str, Any], logical_id: str) -> list[str]:
    return template["Resources"][logical_id].get("DependsOn", [])


def logical_ids(template: dict[str, Any], type_name: str, prefix: str) -> list[str]:
    return [k for k, r in template["Resources"].items() if r["Type"] == type_name and k.startswith(prefix)]


def nodegroup_id(template: dict[str, Any], pool: str) -> str:
    """Logical id of the nodegroup labelled ``trainium-eks/pool=<pool>``."""
    (found,) = [
        k
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::EKS::Nodegroup" and r["Properties"]["Labels"].get("trainium-eks/pool") == pool
    ]
    return found
