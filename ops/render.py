"""`ops render`: the serving layer's manifests (Namespace, RayService) as multi-document YAML, offline.

It calls the very functions the Pulumi component calls (`namespace_manifest`, `build_rayservice`,
`RayServiceManifest.to_dict`), so what a reviewer reads here is what `pulumi up` applies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from config.settings import Settings


class _ManifestDumper(yaml.SafeDumper):
    """Multi-line strings as `|` blocks: serveConfigV2 is a YAML document inside a string, and escaped
    `\\n`s would make it unreadable in review."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _str_representer)


def manifests(settings: Settings) -> list[dict[str, Any]]:
    from components.rayservice_spec import build_rayservice, namespace_manifest, placement_for

    return [namespace_manifest(settings), build_rayservice(settings, placement_for(settings)).to_dict()]


def render_manifests(settings: Settings) -> str:
    from components.rayservice_spec import HF_TOKEN_KEY, HF_TOKEN_SECRET

    text = yaml.dump_all(
        manifests(settings), Dumper=_ManifestDumper, sort_keys=False, explicit_start=True, width=110
    )
    if settings.hugging_face_token:
        # The token is encrypted in the stack file; only the Pulumi program can create the Secret.
        text = (
            f"# The RayService reads Secret {HF_TOKEN_SECRET} (key {HF_TOKEN_KEY}), which `pulumi up` "
            "creates from huggingFaceToken; it is not rendered here.\n" + text
        )
    return text
