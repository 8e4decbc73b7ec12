"""The PTX parser: comments/strings never yield instructions, opcodes keep every modifier, calls form a graph."""

import pytest

from kernelpro.errors import KernelProError
from kernelpro.static.ptx import parse_ptx, tokenize

MODULE = r"""
// wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 in a line comment
/* setmaxnreg.inc.sync.aligned.u32 240;
   multi-line block comment */
.version 8.7
.target sm_90a
.address_size 64
.file 1 "tcgen05.mma.cta_group::1.kind::f16; \" still a string"
.global .align 4 .b8 table[4] = {1, 2, 3, 4};

.func leaf()
{
	mbarrier.init.shared::cta.b64 [%r1], 1;
	ret;
}

.visible .func dead()
{
	call.uni leaf, ();
	ret;
}

.func (.param .b32 rv) live(.param .b32 a)
{
	.reg .pred %p<2>;
	.reg .b32 %r<3>;
	elect.sync %r1|%p1, -1;
	ret;
}

.visible .entry k(
	.param .u64 k_param_0
)
.maxntid 128, 1, 1
{
	.reg .pred %p<3>;
	.reg .b32 %r<9>;
	.reg .b64 %rd<4>;
$L_top:
	@%p1 bra $L_top;
	@!%p2 setmaxnreg.dec.sync.aligned.u32 40;  // trailing comment: wgmma.fence.sync.aligned;
	{
	.reg .pred q;
	wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%r1, %r2}, %rd1, %rd2, q, 1, 1, 0, 0;
	}
	cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd3, {%r4, %r5}], [%r6];
	{
	.param .b32 retval0;
	call.uni (retval0), live, (retval0);
	}
	ret;
}
"""


def test_header_and_functions():
    m = parse_ptx(MODULE)
    assert (m.version, m.target, m.address_size) == ("8.7", "sm_90a", 64)
    assert m.entries == ["k"]
    assert set(m.functions) == {"leaf", "dead", "live", "k"}
    assert m.functions["k"].directives == [".maxntid 128 , 1 , 1"]


def test_opcodes_keep_all_modifiers_and_predicates():
    k = parse_ptx(MODULE).functions["k"]
    ops = [i.opcode for i in k.instructions]
    assert ops == ["bra", "setmaxnreg.dec.sync.aligned.u32",
                   "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
                   "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes", "call.uni", "ret"]
    wg = k.instructions[2]
    assert wg.base == "wgmma" and wg.modifiers[:3] == ["mma_async", "sync", "aligned"] and wg.modifiers[-1] == "bf16"
    assert wg.operands[0] == "{%r1,%r2}" and len(wg.operands) == 8
    assert k.instructions[0].predicate == "%p1" and k.instructions[1].predicate == "!%p2"
    assert k.instructions[3].operands[1] == "[%rd3,{%r4,%r5}]"
    assert k.labels == ["$L_top"]


def test_comments_and_strings_are_not_instructions():
    m = parse_ptx(MODULE)
    every = [i.opcode for f in m.functions.values() for i in f.instructions]
    assert not any(op.startswith("tcgen05") for op in every)  # only in the .file string
    assert every.count("setmaxnreg.dec.sync.aligned.u32") == 1 and not any("inc" in op for op in every)
    assert not any(op.startswith("wgmma.fence") for op in every)  # only in a trailing comment


def test_call_graph_reachability():
    m = parse_ptx(MODULE)
    assert m.reachable_functions("k") == ["k", "live"]
    assert sorted(m.unreachable_functions()) == ["dead", "leaf"]  # leaf is called, but only by dead
    reach = {ins.base for _, ins in m.reachable_instructions("k")}
    assert "elect" in reach and "mbarrier" not in reach


def test_indirect_call_reaches_address_taken_functions():
    text = """.version 8.7
.target sm_90a
.address_size 64
.func f() { fence.proxy.async.shared::cta; ret; }
.func g() { ret; }
.visible .entry k() {
	.reg .b64 %rd<2>;
	mov.u64 %rd1, f;
	call %rd1, (), proto;
	ret;
}
"""
    m = parse_ptx(text)
    assert m.functions["k"].indirect_calls
    assert sorted(m.reachable_functions("k")) == ["f", "k"]


def test_prototype_then_definition():
    text = """.version 8.7
.target sm_90a
.address_size 64
.extern .func (.param .b32 r) vprintf (.param .b64 a, .param .b64 b);
.func helper();
.visible .entry k() { call.uni helper, (); ret; }
.func helper() { elect.sync %r1|%p1, -1; ret; }
"""
    m = parse_ptx(text)
    assert not m.functions["vprintf"].has_body
    assert [i.opcode for _, i in m.reachable_instructions("k")] == ["call.uni", "ret", "elect.sync", "ret"]


def test_debug_sections_are_skipped():
    text = """.version 8.7
.target sm_90a
.address_size 64
.visible .entry k() {
	.loc 1 12 5
	ret;
}
.section .debug_str
{
$L__info_string0:
.b8 95,90,0
}
"""
    m = parse_ptx(text)
    assert [i.opcode for i in m.functions["k"].instructions] == ["ret"]


@pytest.mark.parametrize("bad, what", [
    ('.version 8.7\n.target sm_90a\n/* never closed', r"unterminated /\* comment"),
    ('.version 8.7\n.file 1 "never closed\n', "unterminated string"),
    (".version 8.7\n.target sm_90a\n.visible .entry k() { ret;\n", "ends unexpectedly"),
])
def test_malformed_ptx_is_a_one_line_error(bad, what):
    with pytest.raises(KernelProError, match=what):
        parse_ptx(bad)


def test_tokenizer_line_numbers_survive_block_comments():
    toks = [t for t in tokenize("a /* x\ny\nz */ b\nc") if t.kind == "ID"]
    assert [(t.text, t.line) for t in toks] == [("a", 1), ("b", 3), ("c", 4)]
