"""Signing a bundle's manifest and pinning the trusted public keys into its app.

The signing process runs the locked `cryptography` (`scripts/sign_manifest.py` in a PEX of
`[gpu-bundle-signing].resolve`). It reads the private key from its absolute path outside the
sandbox and is `PER_SESSION`: the key's bytes are never an input digest, an env var or a cache
entry, and a changed key file is read again on the next run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pants.backend.python.subsystems.setup import PythonSetup
from pants.backend.python.target_types import EntryPoint
from pants.backend.python.util_rules.interpreter_constraints import InterpreterConstraints
from pants.backend.python.util_rules.pex import PexRequest, VenvPex, VenvPexProcess
from pants.backend.python.util_rules.pex_requirements import PexRequirements, Resolve
from pants.base.build_root import BuildRoot
from pants.engine.fs import CreateDigest, Digest, FileContent
from pants.engine.process import ProcessCacheScope, ProcessResult
from pants.engine.rules import Get, collect_rules, rule
from pants.util.resources import read_resource

from gpu_build.subsystems.signing import GpuBundleSigning
from gpu_build.util_rules.bundle_field_set import DeployBundleError
from gpu_spec.signature import Signature, SignatureFormatError, key_id, parse_public_key

SCRIPT = "sign_manifest.py"
SIGNING_SPEC = ("__init__.py", "safe_read.py")  # what of gpu_spec the script imports


def signing_key_path(signing: GpuBundleSigning, build_root: BuildRoot) -> str | None:
    """The key file's absolute path; refused inside the repository, where it could be committed."""
    if not signing.key_file:
        return None
    path = os.path.abspath(os.path.join(build_root.path, os.path.expanduser(signing.key_file)))
    if os.path.commonpath([path, build_root.path]) == build_root.path:
        raise DeployBundleError(
            f"`[gpu-bundle-signing].key_file` is {signing.key_file!r}, inside the repository "
            f"({build_root.path}): keep the private key outside it (e.g. ~/.config/gpu_build/)."
        )
    return path


@dataclass(frozen=True)
class SigningTool:
    pex: VenvPex
    key_path: str


@rule(desc="Build the bundle-signing tool")
async def signing_tool(
    signing: GpuBundleSigning,
    python_setup: PythonSetup,
    build_root: BuildRoot,
) -> SigningTool:
    key_path = signing_key_path(signing, build_root)
    assert key_path is not None, "requested only with a key configured"
    script = FileContent(SCRIPT, read_resource("gpu_build.scripts", SCRIPT))
    # its reader of the key and manifest files (standard library only)
    spec = [FileContent(f"gpu_spec/{n}", read_resource("gpu_spec", n)) for n in SIGNING_SPEC]
    sources = await Get(Digest, CreateDigest([script, *spec]))
    ics = python_setup.resolves_to_interpreter_constraints.get(signing.resolve)
    pex = await Get(
        VenvPex,
        PexRequest(
            output_filename="gpu_bundle_signing.pex",
            internal_only=True,
            requirements=PexRequirements(
                ["cryptography"],
                from_superset=Resolve(signing.resolve, use_entire_lockfile=False),
                description_of_origin="[gpu-bundle-signing]",
            ),
            interpreter_constraints=InterpreterConstraints(
                ics or python_setup.interpreter_constraints
            ),
            sources=sources,
            main=EntryPoint(SCRIPT[: -len(".py")]),
        ),
    )
    return SigningTool(pex, key_path)


@dataclass(frozen=True)
class PinnedKeys:
    keys: tuple[str, ...]  # 64-hex public keys, the signing key's first


@rule(desc="Find the bundle keys to pin")
async def pinned_keys(signing: GpuBundleSigning) -> PinnedKeys:
    keys = []
    for text in signing.trusted_keys:
        try:
            keys.append(parse_public_key(text, "`[gpu-bundle-signing].trusted_keys`").hex())
        except SignatureFormatError as e:
            raise DeployBundleError(str(e)) from e
    if keys and not signing.key_file:
        raise DeployBundleError(
            "`[gpu-bundle-signing].trusted_keys` is set but `key_file` is not: the bundles "
            "would be unsigned, and their own apps would refuse them. Set `key_file` too."
        )
    if signing.key_file:
        tool = await Get(SigningTool)
        result = await Get(
            ProcessResult,
            VenvPexProcess(
                tool.pex,
                argv=("public-key", tool.key_path),
                description="Read the bundle signing key's public key",
                cache_scope=ProcessCacheScope.PER_SESSION,
            ),
        )
        keys.insert(0, result.stdout.decode().strip())
    return PinnedKeys(tuple(dict.fromkeys(keys)))


@dataclass(frozen=True)
class SignManifestRequest:
    manifest: Digest  # holding the manifest at `path`
    path: str


@dataclass(frozen=True)
class ManifestSignature:
    digest: Digest  # the signature beside the manifest, or empty when no key is configured
    key_id: str | None


@rule(desc="Sign a bundle manifest")
async def sign_manifest(
    request: SignManifestRequest, signing: GpuBundleSigning
) -> ManifestSignature:
    if not signing.key_file:
        return ManifestSignature(await Get(Digest, CreateDigest([])), None)
    tool = await Get(SigningTool)
    result = await Get(
        ProcessResult,
        VenvPexProcess(
            tool.pex,
            argv=("sign", tool.key_path, request.path),
            input_digest=request.manifest,
            description=f"Sign {request.path}",
            cache_scope=ProcessCacheScope.PER_SESSION,
        ),
    )
    public, signature = result.stdout.decode().split()
    kid = key_id(bytes.fromhex(public))
    sig = FileContent(f"{request.path}.sig", Signature(kid, bytes.fromhex(signature)).dumps())
    return ManifestSignature(await Get(Digest, CreateDigest([sig])), kid)


def rules():
    return collect_rules()
