"""Low-precision dot products on x86 CPUs: bf16 and int8 tensor intrinsics, the CPU features each
precision needs, and the design space that tiles around the intrinsic.

Why a module of its own: TVM 0.27 registers no bf16 dot product, and its TIR pipeline rewrites
every bfloat16 value to float32 before code generation (`BF16ComputeLegalize`), so a bf16 LLVM
intrinsic cannot be called from TIR directly. Each intrinsic here calls a micro-kernel written in
LLVM IR (one `vdpbf16ps`: 16 fp32 sums of 2 bf16 products; one `vpdpbusd`: 16 int32 sums of 4
u8 x i8 products) that LLVM links into the kernel and inlines; the TIR only passes pointers. The
design space is MetaSchedule's own (`MultiLevelTilingWithIntrin` around the intrinsic, the CPU's
default rules for the rest); a post-processor attaches the micro-kernel's IR to the schedule, so
a record replayed anywhere (tuning, a store, a rebuild) links it again.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from autosearch.errors import TargetError
from autosearch.hostinfo import cpu_flags

__all__ = [
    "BF16_INTRIN",
    "INT8_INTRIN",
    "LAYOUT_REWRITE",
    "PRECISIONS",
    "Precision",
    "check_precision",
    "get_precision",
    "kernel_of",
    "module_precision",
    "register_dot_kernels",
    "script_precision",
    "space_generator",
]

#: The registered names of the dot products: 16 sums a call, of `depth` products each.
BF16_INTRIN = "autosearch_dot_16x2_bf16"
INT8_INTRIN = "autosearch_dot_16x4_u8i8"

#: The loop annotation that makes TVM's LLVM code generator link IR text into the module.
_IMPORT_KEY = "pragma_import_llvm"


@dataclass(frozen=True)
class _DotKernel:
    """One micro-kernel: c[0:16] += sum over `steps` x `depth` of a[p, 0:depth] (broadcast) *
    b[p, 0:16, 0:depth], one instruction a step."""

    intrin: str
    symbol: str
    depth: int
    a_dtype: str
    b_dtype: str
    acc_dtype: str
    #: How the TIR passes the operands' pointers: bf16 buffers are stored as uint16 once TVM
    #: legalizes them, and a pointer's element type must match its storage.
    a_ptr: str
    b_ptr: str
    #: LLVM vector types of the accumulator and of the operands, and the instruction.
    llvm_acc: str
    llvm_operand: str
    llvm_intrinsic: str
    #: Instructions a call (the input channels of a convolution's channel block / `depth`): the
    #: accumulator is loaded and stored once a call. Why: one step a call loads and stores the
    #: 16 sums around every instruction, and LLVM keeps them in memory; a zmm store every
    #: instruction capped the tuned int8 convolutions of ResNet-50 at ~430 GOP/s on a Zen 4
    #: whatever their tiles (bench/README "Convolutions in int8").
    steps: int = 1

    def with_steps(self, steps: int) -> _DotKernel:
        """This kernel summing `steps` instructions a call (its own intrinsic and symbol)."""
        if steps == 1:
            return self
        return dataclasses.replace(
            self, intrin=f"{self.intrin}_x{steps}", symbol=f"{self.symbol}_x{steps}", steps=steps
        )

    def ir(self) -> str:
        """The kernel in LLVM IR: `linkonce_odr` so that the copies linked from several schedules of
        one library merge, `alwaysinline` so that none stays a call. Each step's operands are 4
        bytes of `a` (one 32-bit lane broadcast) and 64 bytes of `b` further on."""
        k = self
        body = []
        acc = "%cv"
        for p in range(k.steps):
            body.append(f"""  %ap{p} = getelementptr i8, ptr %a, i64 {4 * p}
  %av{p} = load i32, ptr %ap{p}, align 1
  %ins{p} = insertelement <16 x i32> poison, i32 %av{p}, i64 0
  %bc{p} = shufflevector <16 x i32> %ins{p}, <16 x i32> poison, <16 x i32> zeroinitializer
  %abc{p} = bitcast <16 x i32> %bc{p} to {k.llvm_operand}
  %bp{p} = getelementptr i8, ptr %b, i64 {64 * p}
  %bv{p} = load {k.llvm_operand}, ptr %bp{p}, align 1
  %r{p} = call {k.llvm_acc} @{k.llvm_intrinsic}({k.llvm_acc} {acc}, {k.llvm_operand} %abc{p}, {k.llvm_operand} %bv{p})""")
            acc = f"%r{p}"
        steps = "\n".join(body)
        return f"""
define linkonce_odr i32 @{k.symbol}(ptr noalias %c, ptr noalias %a, ptr noalias %b) #0 {{
  %cv = load {k.llvm_acc}, ptr %c, align 4
{steps}
  store {k.llvm_acc} {acc}, ptr %c, align 4
  ret i32 0
}}
declare {k.llvm_acc} @{k.llvm_intrinsic}({k.llvm_acc}, {k.llvm_operand}, {k.llvm_operand})
attributes #0 = {{ alwaysinline nounwind }}
"""


# bf16: LLVM >= 17 types vdpbf16ps's operands as bfloat vectors. int8: TVM's own VNNI intrinsic
# (`dot_16x4_vnni`) loads vectors in TIR, which fails TVM's lowering whenever the search vectorizes
# a loop around it (every schedule of a BERT dense measured so); the extern kernel is scalarized there.
_KERNELS = {
    BF16_INTRIN: _DotKernel(
        BF16_INTRIN,
        "autosearch_dpbf16_16x2",
        2,
        "bfloat16",
        "bfloat16",
        "float32",
        "uint16",
        "uint16",
        "<16 x float>",
        "<32 x bfloat>",
        "llvm.x86.avx512bf16.dpbf16ps.512",
    ),
    INT8_INTRIN: _DotKernel(
        INT8_INTRIN,
        "autosearch_vpdpbusd_16x4",
        4,
        "uint8",
        "int8",
        "int32",
        "uint8",
        "int8",
        "<16 x i32>",
        "<16 x i32>",
        "llvm.x86.avx512.vpdpbusd.512",
    ),
}


@dataclass(frozen=True)
class Precision:
    """What one `--precision` asks of the CPU and of the design space."""

    name: str
    #: LLVM feature names the target CPU needs (`llc -mattr=help` spelling), none for fp32.
    llvm_features: tuple[str, ...] = ()
    #: The same features as /proc/cpuinfo spells them (what the measuring host must have).
    cpu_flags: tuple[str, ...] = ()
    #: The tensor intrinsic the multiply-accumulate is tiled around, None for fp32.
    intrin: str | None = None


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32"),
    "bf16": Precision("bf16", ("avx512bf16",), ("avx512_bf16",), BF16_INTRIN),
    "int8": Precision("int8", ("avx512vnni",), ("avx512_vnni",), INT8_INTRIN),
}


def get_precision(name: str) -> Precision:
    """The precision called `name`, or one line naming those there are."""
    try:
        return PRECISIONS[name]
    except KeyError:
        raise TargetError(f"unknown precision {name!r}: choose one of {', '.join(PRECISIONS)}") from None


def check_precision(precision: Precision, target: Any, *, measured_here: bool = True) -> None:
    """Refuse, in one line naming what is missing, a precision the target CPU cannot run.

    The target's `mcpu` must have the instructions (LLVM's feature list); when the schedules are
    also measured on this machine, so must this CPU (its /proc/cpuinfo flags).
    """
    if not precision.llvm_features:
        return
    from tvm.target import codegen

    if target.kind.name != "llvm":
        raise TargetError(f"--precision {precision.name} is for x86 CPUs (llvm targets), not {target.kind.name}")
    if precision.name == "bf16" and codegen.llvm_version_major() < 17:
        raise TargetError("--precision bf16 needs TVM built with LLVM >= 17 (bfloat vector types)")
    mcpu = str(target.attrs.get("mcpu", "") or "generic")
    missing = [f for f in precision.llvm_features if not codegen.llvm_cpu_has_features([f], target)]
    flags = cpu_flags() if measured_here else None
    if missing:
        # a VM may report an older CPU model than its flags (an Intel Xeon with AMX that LLVM names
        # rocketlake): the instructions run here, only the target's name lacks them
        if flags is not None and all(f in flags for f in precision.cpu_flags):
            cores = target.attrs.get("num-cores", 1)
            raise TargetError(
                f"--precision {precision.name} needs {', '.join(missing)}: this CPU has it but LLVM names it {mcpu}; "
                f'give --target \'{{"kind":"llvm","mcpu":"sapphirerapids","num-cores":{cores}}}\''
            )
        raise TargetError(
            f"--precision {precision.name} needs {', '.join(missing)}, which the target CPU {mcpu} lacks "
            "(LLVM's feature list); use --precision fp32 or a CPU that has it"
        )
    if flags is not None:
        lacking = [f for f in precision.cpu_flags if f not in flags]
        if lacking:
            raise TargetError(
                f"--precision {precision.name} needs {', '.join(lacking)}, which this machine's CPU lacks "
                "(/proc/cpuinfo flags): its kernels cannot run here"
            )


#: A buffer of the dot-product packing in TVMScript: innermost (16, 2) bf16 or (16, 4) int8, the
#: extents plain or `T.int64(...)` (a network's task).
_PACKED = {
    dtype: re.compile(rf'16\)?, (?:T\.int64\()?{pairs}\)?\), "{dtype}"')
    for dtype, pairs in (("bfloat16", 2), ("int8", 4))
}


def script_precision(text: str) -> Precision:
    """The precision a program in TVMScript computes in: bf16 or int8 where a buffer is a weight in
    the dot-product packing (`workloads.lowp`'s layout), else fp32 (a bf16 model's other programs
    included: they keep MetaSchedule's own space). A store's workload IR is such text."""
    packed = {dtype for dtype, pattern in _PACKED.items() if pattern.search(text)}
    if "bfloat16" in packed:
        return PRECISIONS["bf16"]
    if "int8" in packed:
        return PRECISIONS["int8"]
    return PRECISIONS["fp32"]


def module_precision(mod: Any) -> Precision:
    """`script_precision` of a workload's program."""
    return script_precision(mod.script())


_REGISTERED: set[str] = set()


#: Steps a call of the convolutions' kernels: a 16-channel block's input channels over the
#: instruction's depth (int8: 16 / 4, bf16: 16 / 2), and an 8-channel block's.
_CONV_STEPS = (2, 4, 8)


def register_dot_kernels() -> None:
    """Register every micro-kernel's tensor intrinsic (once a process): a trace that tensorizes
    with one replays only where it is registered (a store's records, a saved best schedule)."""
    for kernel in _KERNELS.values():
        for steps in (1, *_CONV_STEPS):
            _register(kernel.with_steps(steps))


#: A convolution's weight in the dot-product packing (`workloads.lowp.pack_conv_weight`): seven
#: extents, the last three (input block / depth, 16, depth).
_CONV_PACKED = re.compile(
    r"T\.Buffer\(\((?:(?:T\.int64\()?\d+\)?, ){4}(?:T\.int64\()?(\d+)\)?, (?:T\.int64\()?16\)?, "
    r"(?:T\.int64\()?(\d+)\)?\), \"(?:bfloat16|int8)\"\)"
)


def kernel_of(mod: Any, precision: Precision) -> _DotKernel:
    """The micro-kernel `mod`'s schedules tensorize with: a packed convolution's sums a whole
    channel block a call (`_DotKernel.steps`), a dense layer's one instruction a call."""
    kernel = _KERNELS[precision.intrin]  # type: ignore[index]
    match = _CONV_PACKED.search(mod.script())
    if match and int(match.group(2)) == kernel.depth and int(match.group(1)) in _CONV_STEPS:
        return kernel.with_steps(int(match.group(1)))
    return kernel


def _register(kernel: _DotKernel) -> None:
    """Register `kernel`'s tensor intrinsic once a process."""
    if kernel.intrin in _REGISTERED:
        return
    from tvm.s_tir import TensorIntrin

    desc, impl = _one_step(kernel) if kernel.steps == 1 else _steps(kernel)
    try:
        TensorIntrin.register(kernel.intrin, desc, impl)
    except Exception:  # an earlier copy of this module registered it in this process
        TensorIntrin.get(kernel.intrin)
    _REGISTERED.add(kernel.intrin)


def _one_step(kernel: _DotKernel) -> tuple[Any, Any]:
    """The description and implementation of a one-instruction kernel: A (depth,), B (16, depth)."""
    from tvm.script import tirx as T

    d, a_t, b_t, acc_t = kernel.depth, kernel.a_dtype, kernel.b_dtype, kernel.acc_dtype

    @T.prim_func(s_tir=True)
    def desc(
        A: T.Buffer((d,), a_t, offset_factor=1),  # type: ignore[valid-type]
        B: T.Buffer((16, d), b_t, offset_factor=1),  # type: ignore[valid-type]
        C: T.Buffer((16,), acc_t, offset_factor=1),  # type: ignore[valid-type]
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:d], B[0:16, 0:d])
            T.writes(C[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, d):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], acc_t) * T.cast(B[vi, vk], acc_t)

    @T.prim_func(s_tir=True)
    def impl(
        A: T.Buffer((d,), a_t, offset_factor=1),  # type: ignore[valid-type]
        B: T.Buffer((16, d), b_t, offset_factor=1),  # type: ignore[valid-type]
        C: T.Buffer((16,), acc_t, offset_factor=1),  # type: ignore[valid-type]
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:d], B[0:16, 0:d])
            T.writes(C[0:16])
            T.evaluate(
                T.call_extern(
                    "int32",
                    kernel.symbol,
                    C.access_ptr("rw"),
                    T.tvm_access_ptr(T.type_annotation(kernel.a_ptr), A.data, A.elem_offset, d, 1),
                    T.tvm_access_ptr(T.type_annotation(kernel.b_ptr), B.data, B.elem_offset, 16 * d, 1),
                )
            )

    return desc, impl


def _steps(kernel: _DotKernel) -> tuple[Any, Any]:
    """The description and implementation of a kernel of `steps` instructions: A (steps, depth)
    (the input's channel block split so, `networks.lowp`'s view), B (steps, 16, depth), the
    convolution's (rp, o, rq) loops."""
    from tvm.script import tirx as T

    n, d, a_t, b_t, acc_t = kernel.steps, kernel.depth, kernel.a_dtype, kernel.b_dtype, kernel.acc_dtype

    @T.prim_func(s_tir=True)
    def desc(
        A: T.Buffer((n, d), a_t, offset_factor=1),  # type: ignore[valid-type]
        B: T.Buffer((n, 16, d), b_t, offset_factor=1),  # type: ignore[valid-type]
        C: T.Buffer((16,), acc_t, offset_factor=1),  # type: ignore[valid-type]
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:n, 0:d], B[0:n, 0:16, 0:d])
            T.writes(C[0:16])
            for i in T.serial(0, 16):
                for p in T.serial(0, n):
                    for k in T.serial(0, d):
                        with T.sblock("update"):
                            vi, vp, vk = T.axis.remap("SRR", [i, p, k])
                            C[vi] = C[vi] + T.cast(A[vp, vk], acc_t) * T.cast(B[vp, vi, vk], acc_t)

    @T.prim_func(s_tir=True)
    def impl(
        A: T.Buffer((n, d), a_t, offset_factor=1),  # type: ignore[valid-type]
        B: T.Buffer((n, 16, d), b_t, offset_factor=1),  # type: ignore[valid-type]
        C: T.Buffer((16,), acc_t, offset_factor=1),  # type: ignore[valid-type]
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:n, 0:d], B[0:n, 0:16, 0:d])
            T.writes(C[0:16])
            T.evaluate(
                T.call_extern(
                    "int32",
                    kernel.symbol,
                    C.access_ptr("rw"),
                    T.tvm_access_ptr(T.type_annotation(kernel.a_ptr), A.data, A.elem_offset, n * d, 1),
                    T.tvm_access_ptr(T.type_annotation(kernel.b_ptr), B.data, B.elem_offset, n * 16 * d, 1),
                )
            )

    return desc, impl


def _all_tensorized(sch: Any, blocks: Any) -> bool:
    """Whether every reduction update tiled around the intrinsic became the intrinsic's call.
    `RewriteTensorize` leaves one as loops (and warns) where it cannot match the operands: a
    convolution whose padding the search inlined reads `if_then_else(...)`, not a buffer, and
    would compute in scalar fp32."""
    return not any(sch.get(b).name_hint.endswith("_o_update") and sch.get_child_blocks(b) for b in blocks)


def _padding_kept_postproc() -> Any:
    """The post-processor that refuses a schedule which inlined a padding stage (a block whose
    name ends in `_pad`) into the block tiled around the intrinsic: the intrinsic's operand is
    then `if_then_else(...)`, not a buffer, and `RewriteTensorize` would fail on it (with a long
    warning) and leave the convolution in scalar fp32. Placed before it."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.postproc import PyPostproc

    @derived_object
    class KeepPadding(PyPostproc):
        def __init__(self) -> None:
            super().__init__()
            self.pads: list[str] = []

        def _initialize_with_tune_context(self, context: Any) -> None:
            sch = Schedule(context.mod)
            names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
            self.pads = [name for name in names if name.endswith("_pad")]

        def apply(self, sch: Any) -> bool:
            for name in self.pads:
                try:
                    sch.get_sblock(name)
                except Exception:  # inlined
                    return False
            return True

        def clone(self) -> Any:
            other = KeepPadding()
            other.pads = list(self.pads)
            return other

    return KeepPadding()


#: The annotation of the block `RewriteLayout` adds to copy a weight into its schedule's order;
#: the builder removes that block (`RemoveWeightLayoutRewriteBlock`) and a network's build moves it
#: into a function of its own.
LAYOUT_REWRITE = "meta_schedule.layout_rewrite_preproc"


def _import_kernel_postproc(kernel: _DotKernel) -> Any:
    """The post-processor that attaches `kernel`'s IR to the outermost loop of the first block
    that is not a weight's layout rewrite.

    Why not that block: the builder removes it, and the IR attached to it went too; a 1x1
    convolution (no padding block before it) then built a library that calls an undefined
    `autosearch_dpbf16_16x2`, and loading it killed the runner's worker: 154 of the 666
    measurements of a 10-minute bf16 ResNet-50 run (tests/test_lowp.py)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.postproc import PyPostproc

    @derived_object
    class ImportKernel(PyPostproc):
        def _initialize_with_tune_context(self, context: Any) -> None:
            pass

        def apply(self, sch: Any) -> bool:
            blocks = sch.get_child_blocks(sch.get_sblock("root"))
            if not _all_tensorized(sch, blocks):
                return False
            for block in blocks:
                loops = sch.get_loops(block)
                if loops and LAYOUT_REWRITE not in sch.get(block).annotations:
                    sch.annotate(loops[0], _IMPORT_KEY, kernel.ir())
                    return True
            return False  # nothing to carry the kernel: no schedule of this space can link it

        def clone(self) -> Any:
            return ImportKernel()

    return ImportKernel()


def space_generator(mod: Any, target: Any) -> Any:
    """MetaSchedule's space generator for `mod`: its default for fp32 programs; for bf16 and int8
    ones the CPU's default rules with multi-level tiling around the precision's intrinsic first.

    `RewriteTensorize` leaves the init loops to `RewriteParallelVectorizeUnroll`: vectorizing
    them inside an already vectorized loop fails TVM's lowering on about half the schedules.
    """
    precision = module_precision(mod)
    if precision.intrin is None or target.kind.name != "llvm":
        return "post-order-apply"
    from tvm.s_tir import meta_schedule as ms

    kernel = kernel_of(mod, precision)
    _register(kernel)
    tiled = ms.schedule_rule.MultiLevelTilingWithIntrin(
        kernel.intrin,
        structure="SSRSRS",
        tile_binds=None,
        max_innermost_factor=64,
        vector_load_lens=None,
        reuse_read=None,
        reuse_write=ms.schedule_rule.ReuseType(req="may", levels=[1, 2], scope="global"),
    )
    # The plain multi-level tiling is left out: after it, half the spaces compute bf16 in fp32
    # without the intrinsic, and the search measured those rather than the tensorized ones.
    rules = [tiled if type(r).__name__ == "MultiLevelTiling" else r for r in ms.ScheduleRule.create("llvm")]
    # Tensorized before the weight's layout is rewritten (a network's layout-free weights), as
    # TVM's own VNNI post-processors order them: the rewrite's copy inside the tiled block
    # otherwise no longer matches the intrinsic.
    postprocs = list(ms.Postproc.create("llvm"))
    at = next((i for i, p in enumerate(postprocs) if type(p).__name__ == "RewriteLayout"), len(postprocs))
    postprocs.insert(at, ms.postproc.RewriteTensorize(vectorize_init_loop=False))
    postprocs.insert(at, _padding_kept_postproc())
    postprocs.append(_import_kernel_postproc(kernel))
    return ms.space_generator.PostOrderApply(
        sch_rules=rules, postprocs=postprocs, mutator_probs=ms.Mutator.create("llvm")
    )
