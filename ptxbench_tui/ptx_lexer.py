"""A PTX lexer for display, and a small SASS lexer.

Pygments' `PtxLexer` (2.21) is fine for colour in plain code but not for the
PTX that Hopper and Blackwell kernels are made of: every `::` qualifier comes
out as a label plus an `Error` token, predicate guards (`@%p1`, `@!%p1`) and
the `|` of dual destinations are errors, `tcgen05`, `tensormap` and
`clusterlaunchcontrol` are not instructions, a run of modifiers is one chunk,
and `.bf16`, `.e4m3`, `.b128` are not types. `PtxbenchLexer` reads a
statement the way ptxas does instead: optional label, optional guard, an
opcode, its dot-modifiers one by one (types told apart), then operands.
"""

from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups, default, include
from pygments.lexers.ptx import PtxLexer
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String, Text, Token, Whitespace

# Token kinds of our own, so themes can colour them apart.
Opcode = Keyword
Modifier = Name.Attribute
Type = Keyword.Type
Directive = Keyword.Reserved
StateSpace = Keyword.Pseudo
Guard = Name.Decorator
Register = Name.Variable
SpecialRegister = Name.Builtin
Label = Name.Label
FamilyOpcode = Keyword.Namespace  # async / tensor-core instructions: the families a task asks for

TYPES = (
    "pred", "b8", "b16", "b32", "b64", "b128", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64",
    "f16", "f16x2", "bf16", "bf16x2", "tf32", "f32", "f64", "e4m3", "e5m2", "e4m3x2", "e5m2x2",
    "e2m3", "e3m2", "e2m1", "e2m1x2", "e3m2x2", "e2m3x2", "ue8m0", "ue8m0x2", "ue4m3", "s4", "u4", "s2",
    "v2", "v4", "v8", "x1", "x2", "x4", "x8", "x16", "x32", "x64", "x128",
)
STATE_SPACES = ("reg", "sreg", "const", "global", "local", "param", "shared", "tex", "cluster", "cta")
DIRECTIVES = (
    "version", "target", "address_size", "entry", "func", "visible", "extern", "weak", "common",
    "align", "maxnreg", "maxntid", "reqntid", "minnctapersm", "maxnctapersm", "reqnctapercluster",
    "explicitcluster", "maxclusterrank", "noreturn", "pragma", "loc", "file", "section", "alias",
    "callprototype", "calltargets", "branchtargets", "abi_preserve", "abi_preserve_control",
)
# Opcodes of the instruction families PTXBench asks for.
# Opcodes of the Hopper/Blackwell instruction families a task can ask for,
# coloured apart from ordinary instructions.
FAMILY_OPCODES = frozenset((
    "wgmma", "tcgen05", "mbarrier", "setmaxnreg", "stmatrix", "ldmatrix", "tensormap",
    "clusterlaunchcontrol", "elect", "griddepcontrol", "mapa", "getctarank", "multimem",
))
SPECIAL_REGISTERS = (
    "tid", "ntid", "laneid", "warpid", "nwarpid", "ctaid", "nctaid", "smid", "nsmid", "gridid", "clock",
    "clock64", "globaltimer", "lanemask_eq", "lanemask_le", "lanemask_lt", "lanemask_ge", "lanemask_gt",
    "cluster_ctaid", "cluster_nctaid", "cluster_ctarank", "cluster_nctarank", "clusterid", "nclusterid",
    "is_explicit_cluster", "dynamic_smem_size", "total_smem_size", "aggr_smem_size", "envreg",
)

_IDENT = r"[A-Za-z_$][\w$]*"
_MOD = r"\.[A-Za-z0-9_]+(?:::[A-Za-z0-9_]+)*"


def _modifier_callback(lexer, match):
    """One `.qualifier` (possibly `::`-joined): a type, a state space, a directive or a modifier."""
    text = match.group(0)
    word = text[1:]
    if word in TYPES:
        yield match.start(), Type, text
    elif word.split("::")[0] in STATE_SPACES:
        yield match.start(), StateSpace, text
    elif word in DIRECTIVES:
        yield match.start(), Directive, text
    else:
        yield match.start(), Modifier, text


def _opcode_callback(lexer, match):
    text = match.group(0)
    yield match.start(), (FamilyOpcode if text in FAMILY_OPCODES else Opcode), text


class PtxbenchLexer(PtxLexer):
    """PTX as ptxas reads it: see the module docstring for what it fixes."""

    name = "PTX (PTXBench)"
    aliases = ["ptxbench-ptx"]
    filenames = []

    tokens = {
        # A statement starts here: label, guard, opcode, or a directive.
        "root": [
            include("space"),
            (r"(" + _IDENT + r")([ \t]*)(:)(?!:)", bygroups(Label, Whitespace, Punctuation)),
            (r"@!?%?" + _IDENT, Guard),
            (_MOD, _modifier_callback, "directive"),
            (r"[{}();,]", Punctuation),
            (r"[A-Za-z_]\w*", _opcode_callback, ("operands", "modifiers")),
            include("values"),
        ],
        "space": [
            (r"\s+", Whitespace),
            (r"//[^\n]*", Comment.Single),
            (r"/\*", Comment.Multiline, "comment"),
        ],
        "comment": [
            (r"[^*]+", Comment.Multiline),
            (r"\*/", Comment.Multiline, "#pop"),
            (r"\*", Comment.Multiline),
        ],
        # Right after an opcode: `.a.b::c.bf16` one qualifier at a time.
        "modifiers": [
            (_MOD, _modifier_callback),
            default("#pop"),
        ],
        # An instruction's operands run to `;`, across lines (long wgmma lists do).
        "operands": [
            include("space"),
            (r";", Punctuation, "#pop"),
            (r"[{}]", Punctuation),
            include("values"),
        ],
        # A directive or declaration: to the end of its line, `;`, or the body's `{`.
        "directive": [
            (r"\n", Whitespace, "#pop"),
            (r"[ \t]+", Whitespace),
            (r"//[^\n]*", Comment.Single),
            (r";", Punctuation, "#pop"),
            (r"\{", Punctuation, "#pop"),
            include("values"),
        ],
        "values": [
            (r"%(?:" + "|".join(SPECIAL_REGISTERS) + r")(?:\.[xyz])?\b", SpecialRegister),
            (r"%" + _IDENT + r"(?:<\d+>)?", Register),
            (r"\$" + r"[\w$]+", Label),
            (_MOD, _modifier_callback),
            (r"0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}", Number.Float),
            (r"0[xX][0-9a-fA-F]+U?", Number.Hex),
            (r"-?\d+\.\d*(?:[eE][-+]?\d+)?", Number.Float),
            (r"-?\d+U?", Number.Integer),
            (r'"[^"\n]*"', String),
            (r"\|", Operator),  # dual destination: setp … %p|%q
            (r"[-+*/!~&^<>=]", Operator),
            (r"[\[\](),:]", Punctuation),
            (_IDENT, Name),
            (r"\s+", Whitespace),
            (r".", Text),
        ],
    }


class SassLexer(RegexLexer):
    """cuobjdump -sass listings: addresses, guards, opcodes with modifiers, registers."""

    name = "SASS"
    aliases = ["ptxbench-sass"]
    filenames = []

    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"/\*[0-9a-fA-F]{4,}\*/", Comment.Special),  # instruction address
            (r"/\*.*?\*/", Comment.Multiline),
            (r"(Function)(\s*:\s*)(\S+)", bygroups(Keyword.Reserved, Punctuation, Name.Function)),
            (r"\.(?:headerflags|target|section|text\.\S*)", Keyword.Reserved),
            (r"@!?U?P[0-7T]", Guard),
            (r"\bU?R[0-9]+\b|\bU?RZ\b|\bU?P[0-7T]\b|\bSR_\w+|\bB[0-9]+\b", Register),
            (r"\b[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*(?=[\s;])", Opcode),
            (r"c\[0x[0-9a-f]+\]", Name.Constant),
            (r"-?0x[0-9a-fA-F]+|-?\d+(?:\.\d+)?", Number),
            (r"[\[\](){},;|!+\-.]", Punctuation),
            (r"[A-Za-z_][\w.]*", Name),
            (r".", Text),
        ],
    }


TOKEN_ROLES: dict[object, str] = {
    # token type → role; a role maps to a theme variable (see widgets/code_view.py)
    Comment: "comment",
    FamilyOpcode: "family",
    Opcode: "opcode",
    Modifier: "modifier",
    Type: "type",
    Directive: "directive",
    StateSpace: "space",
    Guard: "guard",
    SpecialRegister: "special",
    Register: "register",
    Label: "label",
    Number: "number",
    String: "string",
    Operator: "operator",
    Name.Function: "label",
    Name.Constant: "special",
    Token.Error: "error",
}


def role_of(token_type) -> str | None:
    while token_type is not None:
        role = TOKEN_ROLES.get(token_type)
        if role is not None:
            return role
        token_type = token_type.parent
    return None
