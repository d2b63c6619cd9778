"""TVM's native log noise kept off the screen; every other line of fd 2 still reaches the user."""

from __future__ import annotations

import os

from autosearch.native_log import dropped


def test_noise_and_its_indented_continuation_are_held_back_and_every_other_line_is_replayed(capfd):
    with dropped(noise=("Warning: known noise",)):
        os.write(2, b"[00:00:00] x.cc:1: Warning: known noise, line one\n  its continuation\n")
        os.write(2, b"[00:00:01] y.cc:2: Warning: something a user must see\n  and its detail\n")
        os.write(2, b"Warning: known noise again\nerror: not noise\n")
    err = capfd.readouterr().err
    assert "known noise" not in err and "its continuation" not in err
    assert err == "[00:00:01] y.cc:2: Warning: something a user must see\n  and its detail\nerror: not noise\n"


def test_a_pooling_tasks_design_space_prints_no_unknown_schedule_rule_warning(capfd, host):
    """TOPI's pooling carries a `schedule_rule` only TOPI registered; MetaSchedule's fallback
    warned twice per pooling task of a network (DenseNet-121's runs) for nothing."""
    from tvm import relax

    from autosearch.backends.tvm.space import TaskSpace
    from autosearch.networks.layouts import legalize_map

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, 14, 14), "float32"))
    with bb.function("main", [x]):
        y = bb.emit(relax.op.nn.max_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1)))
        bb.emit_func_output(y)
    mod = relax.transform.LegalizeOps(legalize_map())(bb.get())
    (pool,) = [f for g, f in mod.functions.items() if g.name_hint != "main"]
    import tvm

    space = TaskSpace(tvm.IRModule({"main": pool.with_attr("global_symbol", "main")}), host, name="pool")
    assert space.spaces, "the pooling task has a design space"
    assert "Unknown schedule rule" not in capfd.readouterr().err
