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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autosearch.errors import TargetError
from autosearch.hostinfo import cpu_flags

__all__ = [
    "BF16_INTRIN",
    "INT8_INTRIN",
    "LAYOUT_REWRITE",
    "PRECISIONS",
    "TILE_DEPTH",
    "TILE_ROWS",
    "Precision",
    "get_precision",
    "kernel_of",
    "module_precision",
    "precision_target",
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

    def intrinsic(self) -> tuple[Any, Any]:
        """The tensor intrinsic's description and implementation."""
        return _one_step(self) if self.steps == 1 else _steps(self)

    def tensor_intrinsics(self) -> dict[str, Callable[[], tuple[Any, Any]]]:
        """{name: its description and implementation, made on demand}: the one intrinsic."""
        return {self.intrin: self.intrinsic}

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


#: AMX's tile shape for bf16: 16 rows of 64 bytes (32 bf16 of A; 16 pairs of B's columns; 16 fp32
#: sums of C), and the products one `tdpbf16ps` sums into each output (32 a row).
TILE_ROWS = 16
TILE_DEPTH = 32
#: Reduction steps (of 32) a tile kernel call may cover: the largest of these dividing a dense
#: layer's K / 32 (a kernel's sums stay in its tiles for a whole call). A closed set, so that a
#: trace naming any of them replays where `register_dot_kernels` ran.
_TILE_STEPS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96)

#: x86-64 Linux: `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, without which a process's
#: first tile instruction faults.
_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18


@dataclass(frozen=True)
class _TileKernel:
    """An AMX bf16 micro-kernel: C (16 rows x 16 cols, `rows` x `cols` tiles, fp32) += A (16 rows x
    32 x `steps`, bf16) times B (`cols` weight blocks of the dense packing, `steps` x 16 pairs of
    rows), the sums kept in tile registers for the whole call.

    Why tiles: one `tdpbf16ps` does 16 x 16 x 32 products, 8,192 a 16-cycle slot: 3.6-3.7 TFLOP/s
    a core on an Intel Xeon whose AVX-512 fp32 peak is ~0.2 (measured, bench/README "BERT-base on
    AMX tiles"). The weight packing (N/16, K/2, 16, 2) is already the tile layout of B: 16 pairs of
    rows of 16 columns x 2, 64 bytes a row. Each call loads its tile configuration (the thread may
    have run another library's tiles) and, once a process, asks Linux for the tile state.

    `whole`: a call covers the layer's whole sum, so its sums start at zero in the tiles
    (`tilezero`) and the layer's init pass, which wrote zeros to C for the kernel to load again,
    becomes `init_intrin`, which does nothing (BERT-base's 768 x 768 layer: 119 -> 106 us in C,
    bench/README "BERT-base on AMX tiles")."""

    rows: int
    cols: int
    steps: int
    whole: bool = False

    @property
    def intrin(self) -> str:
        return f"autosearch_amx_bf16_{self.rows}x{self.cols}x{self.steps}" + ("_whole" if self.whole else "")

    @property
    def init_intrin(self) -> str | None:
        """The intrinsic the init pass of a `whole` kernel's layer becomes (None otherwise)."""
        return f"autosearch_amx_bf16_{self.rows}x{self.cols}_init_in_tiles" if self.whole else None

    @property
    def symbol(self) -> str:
        return f"autosearch_tdpbf16ps_{self.rows}x{self.cols}" + ("_from_zero" if self.whole else "")

    def ir(self) -> str:
        """The kernel in LLVM IR: the C tiles loaded, `steps` x (rows A tiles, cols B tiles,
        rows x cols `tdpbf16ps`), the C tiles stored. Arguments: C, A, B and their byte strides
        (C's rows, A's rows, B's weight blocks, B's pair rows), the steps."""
        r, c = self.rows, self.cols
        a_tile = [r * c + m for m in range(r)]
        b_tile = [r * c + r + n for n in range(c)]
        cfg = "\n".join(
            f"  %cs{t} = getelementptr i8, ptr %cfg, i64 {16 + 2 * t}\n  store i16 64, ptr %cs{t}, align 2\n"
            f"  %cr{t} = getelementptr i8, ptr %cfg, i64 {48 + t}\n  store i8 {TILE_ROWS}, ptr %cr{t}, align 1"
            for t in range(r * c + r + c)
        )
        c_ptrs = []
        for m in range(r):
            for n in range(c):
                t = m * c + n
                c_ptrs.append(
                    f"  %crow{t} = mul i64 %ldc, {TILE_ROWS * m}\n"
                    f"  %cm{t} = getelementptr i8, ptr %c, i64 %crow{t}\n"
                    f"  %cp{t} = getelementptr i8, ptr %cm{t}, i64 {64 * n}"
                )
        if self.whole:
            loads_c = "\n".join(f"  call void @llvm.x86.tilezero(i8 {t})" for t in range(r * c))
        else:
            loads_c = "\n".join(
                f"  call void @llvm.x86.tileloadd64(i8 {t}, ptr %cp{t}, i64 %ldc)" for t in range(r * c)
            )
        stores_c = "\n".join(f"  call void @llvm.x86.tilestored64(i8 {t}, ptr %cp{t}, i64 %ldc)" for t in range(r * c))
        step = []
        for m in range(r):
            step.append(
                f"  %arow{m} = mul i64 %lda, {TILE_ROWS * m}\n"
                f"  %am{m} = getelementptr i8, ptr %a, i64 %arow{m}\n"
                f"  %ap{m} = getelementptr i8, ptr %am{m}, i64 %aoff\n"
                f"  call void @llvm.x86.tileloadd64(i8 {a_tile[m]}, ptr %ap{m}, i64 %lda)"
            )
        for n in range(c):
            step.append(
                f"  %bcol{n} = mul i64 %ldbn, {n}\n"
                f"  %bn{n} = getelementptr i8, ptr %b, i64 %bcol{n}\n"
                f"  %bp{n} = getelementptr i8, ptr %bn{n}, i64 %boff\n"
                f"  call void @llvm.x86.tileloadd64(i8 {b_tile[n]}, ptr %bp{n}, i64 %ldbk)"
            )
        for m in range(r):
            for n in range(c):
                step.append(f"  call void @llvm.x86.tdpbf16ps(i8 {m * c + n}, i8 {a_tile[m]}, i8 {b_tile[n]})")
        body = "\n".join(step)
        return f"""
@autosearch_amx_permitted = linkonce_odr global i32 0

define linkonce_odr i32 @{self.symbol}(ptr noalias %c, ptr noalias %a, ptr noalias %b, i64 %ldc, i64 %lda, i64 %ldbn, i64 %ldbk, i32 %steps) #1 {{
entry:
  %cfg = alloca [64 x i8], align 64
  %permitted = load atomic i32, ptr @autosearch_amx_permitted monotonic, align 4
  %ok = icmp ne i32 %permitted, 0
  br i1 %ok, label %config, label %ask
ask:
  %granted = call i64 (i64, ...) @syscall(i64 {_SYS_ARCH_PRCTL}, i64 {_ARCH_REQ_XCOMP_PERM}, i64 {_XFEATURE_XTILEDATA})
  store atomic i32 1, ptr @autosearch_amx_permitted monotonic, align 4
  br label %config
config:
  call void @llvm.memset.p0.i64(ptr align 64 %cfg, i8 0, i64 64, i1 false)
  store i8 1, ptr %cfg, align 64
{cfg}
  call void @llvm.x86.ldtilecfg(ptr %cfg)
{chr(10).join(c_ptrs)}
{loads_c}
  %bstep = mul i64 %ldbk, {TILE_ROWS}
  br label %loop
loop:
  %s = phi i32 [ 0, %config ], [ %next, %loop ]
  %s64 = zext i32 %s to i64
  %aoff = mul i64 %s64, 64
  %boff = mul i64 %s64, %bstep
{body}
  %next = add i32 %s, 1
  %done = icmp eq i32 %next, %steps
  br i1 %done, label %exit, label %loop
exit:
{stores_c}
  ret i32 0
}}
declare i64 @syscall(i64, ...)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1 immarg)
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)
declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)
declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)
declare void @llvm.x86.tilezero(i8 immarg)
attributes #1 = {{ noinline nounwind }}
"""

    def intrinsic(self) -> tuple[Any, Any]:
        """The description and implementation: C (16 x rows, 16 x cols) += A (16 x rows, 32 x
        steps) times B (cols, 16 x steps, 16, 2), read as the packed dense layer reads its weight."""
        from tvm.script import tirx as T

        M, N, K = TILE_ROWS * self.rows, TILE_ROWS * self.cols, TILE_DEPTH * self.steps
        nb, symbol, steps = self.cols, self.symbol, self.steps

        @T.prim_func(s_tir=True)
        def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
            A = T.match_buffer(a, (M, K), "bfloat16", offset_factor=1)
            B = T.match_buffer(b, (nb, K // 2, 16, 2), "bfloat16", offset_factor=1)
            C = T.match_buffer(c, (M, N), "float32", offset_factor=1)
            with T.sblock("root"):
                T.reads(C[0:M, 0:N], A[0:M, 0:K], B[0:nb, 0 : K // 2, 0:16, 0:2])
                T.writes(C[0:M, 0:N])
                for i, j, k in T.grid(M, N, K):
                    with T.sblock("update"):
                        vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                        C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(
                            B[vj // 16, vk // 2, vj % 16, vk % 2], "float32"
                        )

        @T.prim_func(s_tir=True)
        def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
            sa = T.int32()
            sb0 = T.int32()
            sb1 = T.int32()
            sc = T.int32()
            A = T.match_buffer(a, (M, K), "bfloat16", offset_factor=1, strides=[sa, 1])
            B = T.match_buffer(b, (nb, K // 2, 16, 2), "bfloat16", offset_factor=1, strides=[sb0, sb1, 2, 1])
            C = T.match_buffer(c, (M, N), "float32", offset_factor=1, strides=[sc, 1])
            with T.sblock("root"):
                T.reads(C[0:M, 0:N], A[0:M, 0:K], B[0:nb, 0 : K // 2, 0:16, 0:2])
                T.writes(C[0:M, 0:N])
                T.evaluate(
                    T.call_extern(
                        "int32",
                        symbol,
                        C.access_ptr("rw"),
                        T.tvm_access_ptr(T.type_annotation("uint16"), A.data, A.elem_offset, sa * M, 1),
                        T.tvm_access_ptr(T.type_annotation("uint16"), B.data, B.elem_offset, sb0 * nb, 1),
                        T.cast(sc, "int64") * 4,
                        T.cast(sa, "int64") * 2,
                        T.cast(sb0, "int64") * 2,
                        T.cast(sb1, "int64") * 2,
                        steps,
                    )
                )

        return desc, impl

    def tensor_intrinsics(self) -> dict[str, Callable[[], tuple[Any, Any]]]:
        """{name: its description and implementation, made on demand}: the kernel's, and for a
        `whole` kernel the no-op init's (one for every steps count of its tile shape)."""
        out = {self.intrin: self.intrinsic}
        if self.init_intrin is not None:
            out[self.init_intrin] = self.init_intrinsic
        return out

    def init_intrinsic(self) -> tuple[Any, Any]:
        """The description and implementation of `init_intrin`: C (16 x rows, 16 x cols) = 0,
        done by the kernel call that follows (`whole`), so nothing here."""
        from tvm.script import tirx as T

        M, N = TILE_ROWS * self.rows, TILE_ROWS * self.cols

        @T.prim_func(s_tir=True)
        def desc(c: T.handle) -> None:
            C = T.match_buffer(c, (M, N), "float32", offset_factor=1)
            with T.sblock("root"):
                T.reads()
                T.writes(C[0:M, 0:N])
                for i, j in T.grid(M, N):
                    with T.sblock("init"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        C[vi, vj] = T.float32(0)

        @T.prim_func(s_tir=True)
        def impl(c: T.handle) -> None:
            sc = T.int32()
            C = T.match_buffer(c, (M, N), "float32", offset_factor=1, strides=[sc, 1])
            with T.sblock("root"):
                T.reads()
                T.writes(C[0:M, 0:N])
                T.evaluate(0)

        return desc, impl


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


def precision_target(precision: Precision, target: Any, *, measured_here: bool = True, native: bool = False) -> Any:
    """The target to compile `precision` for, or one line naming what is missing.

    The target's CPU must have the instructions (LLVM's feature list); when the schedules are also
    measured on this machine, so must this CPU (its /proc/cpuinfo flags). A VM may report an older
    CPU model than its flags (an Intel Xeon with AVX512_BF16 and AMX that LLVM names `rocketlake`):
    on this machine's own target (`native`, no `--target` given) the instructions its flags list
    are added to the target (`mattr`), AMX's tiles included; a target given by name is refused with
    the one to give.
    """
    if not precision.llvm_features:
        return target
    from tvm.target import codegen

    if target.kind.name != "llvm":
        raise TargetError(f"--precision {precision.name} is for x86 CPUs (llvm targets), not {target.kind.name}")
    if precision.name == "bf16" and codegen.llvm_version_major() < 17:
        raise TargetError("--precision bf16 needs TVM built with LLVM >= 17 (bfloat vector types)")
    mcpu = str(target.attrs.get("mcpu", "") or "generic")
    missing = [f for f in precision.llvm_features if not codegen.llvm_cpu_has_features([f], target)]
    flags = cpu_flags() if measured_here else None
    if missing:
        if flags is not None and all(f in flags for f in precision.cpu_flags):
            if native:
                return _with_host_features(target, precision, flags)
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
        if precision.name == "bf16" and uses_tiles(target):
            lacking += [f for f in _TILE_FLAGS if f not in flags]
        if lacking:
            raise TargetError(
                f"--precision {precision.name} needs {', '.join(lacking)}, which this machine's CPU lacks "
                "(/proc/cpuinfo flags): its kernels cannot run here"
            )
    return target


def _with_host_features(target: Any, precision: Precision, flags: set[str]) -> Any:
    """`target` with the precision's LLVM features added, and AMX's tiles for bf16 where this
    CPU's flags list them."""
    import tvm

    features = list(precision.llvm_features)
    if precision.name == "bf16" and all(f in flags for f in _TILE_FLAGS):
        features += _TILE_FEATURES
    config = dict(target.export())
    config["mattr"] = [*config.get("mattr", []), *(f"+{f}" for f in features)]
    return tvm.target.Target({k: v for k, v in config.items() if k in ("kind", "mcpu", "mattr", "num-cores")})


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


def register_dot_kernels(target: Any = None) -> None:
    """Register every micro-kernel's tensor intrinsic (once a process): a trace that tensorizes
    with one replays only where it is registered (a store's records, a saved best schedule). The
    tile kernels (~1 s for all) where `target` has AMX, or is not known."""
    for kernel in _KERNELS.values():
        for steps in (1, *_CONV_STEPS):
            _register(kernel.with_steps(steps))
    if target is None or uses_tiles(target):
        for rows in (1, 2):
            for cols in (1, 2):
                for steps in _TILE_STEPS:
                    for whole in (False, True):
                        _register(_TileKernel(rows, cols, steps, whole))


#: A convolution's weight in the dot-product packing (`workloads.lowp.pack_conv_weight`): seven
#: extents, the last three (input block / depth, 16, depth).
_CONV_PACKED = re.compile(
    r"T\.Buffer\(\((?:(?:T\.int64\()?\d+\)?, ){4}(?:T\.int64\()?(\d+)\)?, (?:T\.int64\()?16\)?, "
    r"(?:T\.int64\()?(\d+)\)?\), \"(?:bfloat16|int8)\"\)"
)


def kernel_of(mod: Any, precision: Precision, target: Any = None) -> _DotKernel | _TileKernel:
    """The micro-kernel `mod`'s schedules tensorize with: a packed convolution's sums a whole
    channel block a call (`_DotKernel.steps`); a bf16 dense layer's on AMX tiles where the target
    has them and its sizes fill whole tiles (`_TileKernel`), else one instruction a call."""
    kernel = _KERNELS[precision.intrin]  # type: ignore[index]
    match = _CONV_PACKED.search(mod.script())
    if match and int(match.group(2)) == kernel.depth and int(match.group(1)) in _CONV_STEPS:
        return kernel.with_steps(int(match.group(1)))
    if precision.name == "bf16" and target is not None and uses_tiles(target):
        tiles = _tile_kernel(mod)
        if tiles is not None:
            return tiles
    return kernel


def uses_tiles(target: Any) -> bool:
    """Whether `target`'s CPU has AMX's bf16 tiles (LLVM's feature list: `sapphirerapids` and
    later), on which bf16 dense layers tensorize with `_TileKernel`."""
    if target.kind.name != "llvm":
        return False
    from tvm.target import codegen

    return bool(codegen.llvm_cpu_has_features(list(_TILE_FEATURES), target))


#: LLVM's names of the AMX features a tile kernel uses, and /proc/cpuinfo's.
_TILE_FEATURES = ("amx-tile", "amx-bf16")
_TILE_FLAGS = ("amx_tile", "amx_bf16")


def _tile_kernel(mod: Any) -> _TileKernel | None:
    """The tile kernel of a packed bf16 dense layer (block `dense_packed`, rows i, columns j, sum
    k, after any batch axes of a network's layer): two tiles a side where its rows / columns are a
    multiple of 32, else one; the reduction steps the largest of `_TILE_STEPS` dividing K / 32,
    `whole` where that is all of K. None where a size fills no whole tile."""
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    try:
        block = sch.get(sch.get_sblock("dense_packed"))
    except Exception:  # not a packed dense layer
        return None
    if len(block.iter_vars) < 3:
        return None
    m, n, k = (int(v.dom.extent) for v in block.iter_vars[-3:])  # after a network's batch axes
    if m % TILE_ROWS or n % TILE_ROWS or k % TILE_DEPTH:
        return None
    steps = max(s for s in _TILE_STEPS if (k // TILE_DEPTH) % s == 0)
    return _TileKernel(2 if m % 32 == 0 else 1, 2 if n % 32 == 0 else 1, steps, steps * TILE_DEPTH == k)


def _register(kernel: _DotKernel | _TileKernel) -> None:
    """Register `kernel`'s tensor intrinsics once a process (each made only then)."""
    from tvm.s_tir import TensorIntrin

    for name, make in kernel.tensor_intrinsics().items():
        if name in _REGISTERED:
            continue
        desc, impl = make()
        try:
            TensorIntrin.register(name, desc, impl)
        except Exception:  # an earlier copy of this module registered it in this process
            TensorIntrin.get(name)
        _REGISTERED.add(name)


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


def _import_kernel_postproc(kernel: _DotKernel | _TileKernel) -> Any:
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


def _tiled_around_tiles(kernel: _TileKernel, tiling: Any) -> Any:
    """The schedule rule that tiles a packed dense layer around `kernel` and hands the loops
    outside it to `tiling` (MetaSchedule's multi-level tiling, as `MultiLevelTilingWithIntrin`
    does). Why not that rule: its gate (`CheckAutoTensorizeApplicable`) reads each buffer of the
    intrinsic's description as indexed by plain loop variables, and a tile's weight operand is
    read through the packing (`B[j // 16, k // 2, j % 16, k % 2]`); the tiling itself
    (`tile_with_tensor_intrin`) matches it."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule
    from tvm.s_tir.schedule.transform import tile_with_tensor_intrin

    @derived_object
    class TiledAroundTiles(PyScheduleRule):
        def _initialize_with_tune_context(self, context: Any) -> None:
            tiling._initialize_with_tune_context(context)

        def apply(self, sch: Any, block: Any) -> list[Any]:
            if sch.get(block).name_hint != "dense_packed":
                return [sch]
            loop = tile_with_tensor_intrin(sch, block, kernel.intrin)
            if loop is None:
                return [sch]
            outer = sch.blockize(loop)
            sch.annotate(outer, "meta_schedule.auto_tensorize", kernel.intrin)
            if kernel.init_intrin is not None:  # MetaSchedule's reduction rewrite hands it to the init
                sch.annotate(outer, "meta_schedule.auto_tensorize_init", kernel.init_intrin)
            return list(tiling.apply(sch, outer))

        def clone(self) -> Any:
            return _tiled_around_tiles(kernel, tiling.clone())

    return TiledAroundTiles()


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

    kernel = kernel_of(mod, precision, target)
    _register(kernel)
    tiling = dict(
        structure="SSRSRS",
        tile_binds=None,
        max_innermost_factor=64,
        vector_load_lens=None,
        reuse_read=None,
        reuse_write=ms.schedule_rule.ReuseType(req="may", levels=[1, 2], scope="global"),
    )
    if isinstance(kernel, _TileKernel):
        tiled = _tiled_around_tiles(kernel, ms.schedule_rule.MultiLevelTiling(**tiling))
    else:
        tiled = ms.schedule_rule.MultiLevelTilingWithIntrin(kernel.intrin, **tiling)
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
