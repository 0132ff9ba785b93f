"""French missions, translated from a BabyAI instruction tree (not from its English text).

GLAM's French experiment only translated GoTo goals ("aller à la balle verte"); this
covers every instruction of the Baby language in the same infinitive style:

    go to the red ball                           aller à la balle rouge
    pick up a key                                attraper une clef
    open the yellow door                         ouvrir la porte jaune
    put the red ball next to a blue box          mettre la balle rouge à côté d'une boîte bleue
    pick up the grey key, then go to the box     attraper la clef grise, puis aller à la boîte
    go to the box after you pick up the grey key aller à la boîte après avoir attrapé la clef grise

Articles follow the English: "the" when one object matches the description, "a" otherwise.
"""

from __future__ import annotations

from minigrid.envs.babyai.core.verifier import (
    AfterInstr,
    AndInstr,
    BeforeInstr,
    GoToInstr,
    Instr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)

from glamrl.errors import GlamrlError
from glamrl.envs.describe import french_noun_phrase

_LOCATIONS = {"front": "devant toi", "behind": "derrière toi", "left": "à ta gauche", "right": "à ta droite"}

# instruction -> (infinitive, perfect infinitive used after "après", preposition before the object)
_VERBS: dict[type, tuple[str, str, str | None]] = {
    GoToInstr: ("aller", "être allé", "à"),
    PickupInstr: ("attraper", "avoir attrapé", None),
    OpenInstr: ("ouvrir", "avoir ouvert", None),
    PutNextInstr: ("mettre", "avoir mis", None),
}


class UntranslatableInstrError(GlamrlError, TypeError):
    """An instruction type outside the Baby language (no French wording for it)."""


def french_mission(instr: Instr) -> str:
    """French mission of an instruction whose verifier has been reset (object sets known)."""
    if isinstance(instr, BeforeInstr):
        return f"{french_mission(instr.instr_a)}, puis {french_mission(instr.instr_b)}"
    if isinstance(instr, AfterInstr):
        return f"{french_mission(instr.instr_a)} après {_action(instr.instr_b, perfect=True)}"
    if isinstance(instr, AndInstr):
        return f"{french_mission(instr.instr_a)} et {french_mission(instr.instr_b)}"
    return _action(instr, perfect=False)


def _action(instr: Instr, perfect: bool) -> str:
    if type(instr) not in _VERBS:
        raise UntranslatableInstrError(f"no French wording for {type(instr).__name__}")
    infinitive, perfect_infinitive, preposition = _VERBS[type(instr)]
    verb = perfect_infinitive if perfect else infinitive
    if isinstance(instr, PutNextInstr):
        return f"{verb} {_object(instr.desc_move)} à côté {_contract('de', _object(instr.desc_fixed))}"
    obj = _object(instr.desc)
    return f"{verb} {_contract(preposition, obj) if preposition else obj}"


def _object(desc: ObjDesc) -> str:
    """"la balle rouge", "une clef", "l'objet vert à ta gauche"."""
    phrase, gender = french_noun_phrase(desc.type or "object", desc.color)
    if desc.loc is not None:
        phrase += " " + _LOCATIONS[desc.loc]
    if len(desc.obj_set) > 1:
        return ("une " if gender == "f" else "un ") + phrase
    if phrase[0] in "aeiouéè":
        return "l'" + phrase
    return ("la " if gender == "f" else "le ") + phrase


def _contract(preposition: str, noun_phrase: str) -> str:
    """Preposition + article: à le -> au, de le -> du, de une -> d'une."""
    if noun_phrase.startswith("le "):
        return {"à": "au", "de": "du"}[preposition] + noun_phrase[2:]
    if preposition == "de" and noun_phrase.startswith("un"):
        return "d'" + noun_phrase
    return f"{preposition} {noun_phrase}"
