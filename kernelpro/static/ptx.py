"""A PTX parser: tokens, functions, instructions with full opcodes, and the call graph.

Only what verification needs is modelled, but it is modelled properly: comments and string literals
are consumed by the tokenizer (so text inside them can never look like an instruction), `.entry` and
`.func` bodies are parsed with their nested `{ }` scopes, labels and guard predicates are separated
from opcodes, and `call` instructions build a call graph so features count only where some kernel
entry can reach them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernelpro.errors import KernelProError

# Token kinds: ID (identifiers, dotted opcodes, directives, registers), NUM, STR, PUNCT, NL.
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<lc>//[^\n]*)
  | (?P<bc>/\*.*?\*/)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<num>0[fFdD][0-9a-fA-F]+|0[xX][0-9a-fA-F]+U?|0[bB][01]+U?|\d+\.\d*(?:[eE][+-]?\d+)?|\d+U?)
  | (?P<id>[A-Za-z_$%.](?:::|[A-Za-z0-9_$%.])*)
  | (?P<punct>[{}()\[\],;@!|+\-=<>:*/&~?^])
""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    line: int


def tokenize(text: str) -> list[Token]:
    out: list[Token] = []
    pos, line, n = 0, 1, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is not None and m.lastgroup == "punct" and text.startswith("/*", pos):
            m = None  # an unclosed block comment, not a division
        if m is None:
            if text.startswith("/*", pos):
                raise KernelProError(f"PTX line {line}: unterminated /* comment")
            if text[pos] == '"':
                raise KernelProError(f"PTX line {line}: unterminated string literal")
            raise KernelProError(f"PTX line {line}: unexpected character {text[pos]!r}")
        kind = m.lastgroup
        tok = m.group()
        if kind == "nl":
            out.append(Token("NL", "\n", line))
        elif kind == "bc":
            # A block comment spanning lines still ends the lines it spans (for .loc/.file).
            for _ in range(tok.count("\n")):
                out.append(Token("NL", "\n", line))
        elif kind == "str":
            out.append(Token("STR", tok, line))
        elif kind == "num":
            out.append(Token("NUM", tok, line))
        elif kind == "id":
            out.append(Token("ID", tok, line))
        elif kind == "punct":
            out.append(Token("PUNCT", tok, line))
        line += tok.count("\n")
        pos = m.end()
    return out


@dataclass
class Instruction:
    opcode: str                  # full dotted opcode, e.g. wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
    base: str                    # first component, e.g. wgmma
    modifiers: list[str]         # the remaining components
    operands: list[str]          # top-level comma-separated operands, tokens joined
    predicate: str | None = None  # guard, e.g. "%p1" or "!%p1"
    line: int = 0

    def __str__(self) -> str:
        guard = f"@{self.predicate} " if self.predicate else ""
        return f"{guard}{self.opcode} {', '.join(self.operands)};"


@dataclass
class PtxFunction:
    name: str
    kind: str                    # "entry" or "func"
    line: int
    instructions: list[Instruction] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    calls: set[str] = field(default_factory=set)       # direct callees
    address_taken: set[str] = field(default_factory=set)  # functions named as plain operands
    indirect_calls: bool = False
    directives: list[str] = field(default_factory=list)  # performance directives, e.g. ".maxntid 128, 1, 1"
    has_body: bool = True


@dataclass
class PtxModule:
    version: str | None = None
    target: str | None = None
    address_size: int | None = None
    functions: dict[str, PtxFunction] = field(default_factory=dict)

    @property
    def entries(self) -> list[str]:
        return [f.name for f in self.functions.values() if f.kind == "entry"]

    def reachable_functions(self, entry: str) -> list[str]:
        """The entry and every function it can call, directly or through taken addresses."""
        if entry not in self.functions:
            raise KeyError(entry)
        seen: list[str] = []
        stack = [entry]
        while stack:
            name = stack.pop()
            if name in seen or name not in self.functions:
                continue
            seen.append(name)
            fn = self.functions[name]
            stack.extend(sorted(fn.calls))
            if fn.indirect_calls:
                # An indirect call can reach any function whose address the module takes.
                for other in self.functions.values():
                    stack.extend(sorted(other.address_taken))
        return seen

    def reachable_instructions(self, entry: str) -> list[tuple[str, Instruction]]:
        return [(fn, ins) for fn in self.reachable_functions(entry) for ins in self.functions[fn].instructions]

    def unreachable_functions(self) -> list[str]:
        live: set[str] = set()
        for e in self.entries:
            live.update(self.reachable_functions(e))
        return [n for n in self.functions if n not in live]


_LINKAGE = {".visible", ".extern", ".weak", ".common"}
_LINE_DIRECTIVES = {".loc", ".file", ".section"}  # no terminating ';'
_PERF_DIRECTIVES = {".maxntid", ".reqntid", ".minnctapersm", ".maxnctapersm", ".maxnreg", ".noreturn",
                    ".pragma", ".explicitcluster", ".reqnctapercluster", ".maxclusterrank", ".blocksareclusters",
                    ".abi_preserve", ".abi_preserve_control"}


class _Parser:
    def __init__(self, tokens: list[Token]):
        # Newlines only matter for line-terminated directives; keep them and skip elsewhere.
        self.toks = tokens
        self.i = 0
        self.mod = PtxModule()

    def peek(self, skip_nl: bool = True) -> Token | None:
        j = self.i
        while j < len(self.toks):
            if skip_nl and self.toks[j].kind == "NL":
                j += 1
                continue
            return self.toks[j]
        return None

    def next(self, skip_nl: bool = True) -> Token:
        while self.i < len(self.toks):
            t = self.toks[self.i]
            self.i += 1
            if skip_nl and t.kind == "NL":
                continue
            return t
        raise KernelProError("PTX ends unexpectedly (missing ';' or '}')")

    def expect(self, text: str) -> Token:
        t = self.next()
        if t.text != text:
            raise KernelProError(f"PTX line {t.line}: expected {text!r}, found {t.text!r}")
        return t

    def skip_line(self) -> list[Token]:
        out = []
        while self.i < len(self.toks) and self.toks[self.i].kind != "NL":
            out.append(self.toks[self.i])
            self.i += 1
        return out

    def skip_statement(self) -> list[Token]:
        """Tokens up to and including ';' at depth 0, skipping balanced brackets (initializers)."""
        out, depth = [], 0
        while True:
            t = self.next()
            if t.kind == "PUNCT" and t.text in "{([":
                depth += 1
            elif t.kind == "PUNCT" and t.text in "})]":
                depth -= 1
            elif t.kind == "PUNCT" and t.text == ";" and depth == 0:
                return out
            out.append(t)

    def skip_braces(self) -> None:
        self.expect("{")
        depth = 1
        while depth:
            t = self.next()
            if t.text == "{":
                depth += 1
            elif t.text == "}":
                depth -= 1

    def skip_parens(self) -> None:
        self.expect("(")
        depth = 1
        while depth:
            t = self.next()
            if t.text == "(":
                depth += 1
            elif t.text == ")":
                depth -= 1

    def parse(self) -> PtxModule:
        while self.peek() is not None:
            t = self.next()
            if t.kind != "ID":
                raise KernelProError(f"PTX line {t.line}: unexpected {t.text!r} at module level")
            if t.text == ".section":
                self.skip_line()
                if self.peek() is not None and self.peek().text == "{":
                    self.skip_braces()  # DWARF data (.debug_str etc.), not code
            elif t.text in _LINE_DIRECTIVES:
                self.skip_line()
            elif t.text == ".version":
                self.mod.version = "".join(x.text for x in self.skip_line()).strip()
            elif t.text == ".target":
                self.mod.target = "".join(x.text for x in self.skip_line()).split(",")[0].strip()
            elif t.text == ".address_size":
                rest = self.skip_line()
                self.mod.address_size = int(rest[0].text) if rest and rest[0].kind == "NUM" else None
            elif t.text in _LINKAGE:
                continue  # linkage applies to the declaration that follows
            elif t.text in (".entry", ".func"):
                self.parse_function(t)
            else:
                self.skip_statement()  # .global/.shared/.const variables, .alias, .pragma, ...
        return self.mod

    def parse_function(self, kw: Token) -> None:
        kind = "entry" if kw.text == ".entry" else "func"
        if kind == "func" and self.peek() and self.peek().text == "(":
            self.skip_parens()  # return parameters
        name_tok = self.next()
        if name_tok.kind != "ID":
            raise KernelProError(f"PTX line {name_tok.line}: expected a function name after {kw.text}")
        if self.peek() and self.peek().text == "(":
            self.skip_parens()
        fn = PtxFunction(name_tok.text, kind, name_tok.line)
        while True:
            t = self.peek()
            if t is None:
                raise KernelProError(f"PTX: function {fn.name} has no body or ';'")
            if t.text == ";":
                self.next()
                fn.has_body = False
                break
            if t.text == "{":
                self.next()
                self.parse_block(fn)
                break
            if t.kind == "ID" and t.text in _PERF_DIRECTIVES:
                self.next()
                args = self.collect_directive_args()
                fn.directives.append(" ".join([t.text, *args]).strip())
                continue
            raise KernelProError(f"PTX line {t.line}: unexpected {t.text!r} in the header of {fn.name}")
        # A body wins over an earlier prototype (forward declaration) of the same name.
        old = self.mod.functions.get(fn.name)
        if old is None or not old.has_body or fn.has_body:
            if old is not None and old.has_body and fn.has_body:
                raise KernelProError(f"PTX line {fn.line}: function {fn.name} is defined twice")
            self.mod.functions[fn.name] = fn

    def collect_directive_args(self) -> list[str]:
        """Arguments of a header directive: numbers and commas, on its own line (or up to '{')."""
        args = []
        while True:
            t = self.peek(skip_nl=False)
            if t is None or t.kind == "NL" or t.text in ("{", ";") or (t.kind == "ID" and t.text.startswith(".")):
                if t is not None and t.text == ";":
                    self.next()
                return args
            args.append(self.next(skip_nl=False).text)

    def parse_block(self, fn: PtxFunction) -> None:
        """Statements until the matching '}'; nested '{ }' are scopes."""
        depth = 1
        while depth:
            t = self.next()
            if t.text == "{":
                depth += 1
                continue
            if t.text == "}":
                depth -= 1
                continue
            if t.kind == "ID" and t.text in _LINE_DIRECTIVES:
                self.skip_line()
                continue
            if t.kind == "ID" and t.text.startswith("."):
                self.skip_statement()  # .reg/.shared/.local/.param declarations, .pragma
                continue
            if t.kind == "ID" and self.peek(skip_nl=False) is not None and self.peek(skip_nl=False).text == ":":
                self.next(skip_nl=False)
                fn.labels.append(t.text)
                continue
            pred = None
            if t.text == "@":
                neg = ""
                p = self.next()
                if p.text == "!":
                    neg, p = "!", self.next()
                pred = neg + p.text
                t = self.next()
            if t.kind != "ID":
                raise KernelProError(f"PTX line {t.line}: expected an instruction, found {t.text!r}")
            self.parse_instruction(fn, t, pred)

    def parse_instruction(self, fn: PtxFunction, op: Token, pred: str | None) -> None:
        operands: list[list[str]] = [[]]
        depth = 0
        while True:
            t = self.next()
            if t.text == ";" and depth == 0:
                break
            if t.text in ("{", "(", "["):
                depth += 1
            elif t.text in ("}", ")", "]"):
                depth -= 1
            if t.text == "," and depth == 0:
                operands.append([])
                continue
            operands[-1].append(t.text)
        ops = ["".join(o) for o in operands if o]
        parts = op.text.split(".")
        ins = Instruction(op.text, parts[0], parts[1:], ops, pred, op.line)
        fn.instructions.append(ins)
        if ins.base == "call":
            # call{.uni} (ret), callee, (args)[, prototype]; the callee is the first bare operand.
            target = next((o for o in ops if not o.startswith("(")), None)
            if target is None:
                return
            if target.startswith("%"):
                fn.indirect_calls = True
            else:
                fn.calls.add(target)
        else:
            for o in ops:
                if re.fullmatch(r"[A-Za-z_$][\w$]*", o):
                    fn.address_taken.add(o)


def parse_ptx(text: str) -> PtxModule:
    """Parse PTX text; raises KernelProError (one line, with the PTX line) on malformed input."""
    mod = _Parser(tokenize(text)).parse()
    # Keep only names that are functions: operands also name variables and labels.
    for fn in mod.functions.values():
        fn.address_taken &= set(mod.functions)
    return mod
