"""Names spaCy's NER misses: a first-name and surname gazetteer over the tagged tokens.

spaCy's small model finds most names in a personal text but misses rare and foreign ones
("Leocadia forgot her umbrella in my car"), names in lists ("our tutors, Hedda, Greta and
Olav"), names written in lower case ("my cousin ingrid is staying with us") or calls them an
organisation. This presidio recognizer reads the parse presidio already made and reports
``PERSON`` for:

- a **proper noun** (tag ``PROPN``) outside every NER entity that is a first name or a surname
  of the gazetteer, with the proper nouns and initials right before and after it
  ("Ana M. Dimitrova"; at most :data:`MAX_TOKENS` tokens); a capitalised word tagged a common
  noun counts when it is a gazetteer first name and no dictionary word (the tagger's reading of
  a rare name opening a sentence: "Björn forgot his lunch box");
- an ``ORG`` entity of at most :data:`MAX_TOKENS` name-shaped words whose first word is a first
  name of the gazetteer, or each such part of one NER ran over a list ("Arjun and Vikram");
- a first name with a one-word surname of the gazetteer that NER labelled on its own ("Emeka
  Nwosu", Nwosu as an organisation or a nationality), scored like a role so the whole name wins;
- a transcript's **speaker labels**: one to three capitalised words, none a dictionary word,
  opening two or more lines before a colon ("[09:02] Efua: ..."), where one of the speakers is
  a person NER found or a gazetteer name (:meth:`NameGazetteerRecognizer._speakers`);
- a proper noun joined to a ``PERSON`` (NER's or one above) in a list ("Hedda, Greta and Olav":
  either is the other's ``conj`` or ``appos``);
- a **person by its role**: a short entity NER calls an organisation, a place or a group
  (rare names often are: "Ingvild" as ``ORG``, "Carrow" as ``GPE``) standing where the parse
  says a person stands — the possessor of a kin or relation noun ("Ingvild's nephew"), a name
  in apposition to one ("my neighbour Carrow", "Carrow, my neighbour"), or the subject of its
  clause when a gendered pronoun ("he", "her", ...) follows with no other noun argument between
  (an organisation is "it" or "they"), the head of a relative clause opened by "who" ("Anouk,
  who joins the choir"), what a person noun or "name" is ("the patient's name was Amaru
  Quispe"), or the sender after a message noun and "from" ("the invitation from Halvard"); the
  nouns count in the plural too ("my nieces, Ananya and Kavitha"), and so does a
  name listed after such a name; a one-word entity is also a person as the subject of a verb of
  speaking or the one a verb of telling tells ("Priyamvada said ...", "I told Ximena ...",
  :func:`_speaker_or_told`) or listed with the writer ("Tahmina and me");
- a **diminutive** of a gazetteer first name (:func:`diminutive_of`: "Marzenka" of Marzena,
  "Stefanek" of Stefan, "Juanito" of Juan), where a proper noun that is neither a gazetteer name
  nor a dictionary word stands;
- a name in a **slot the parse shows** (recognizer name :data:`SLOT`, scored like a role so it
  wins over NER's place or organisation label): the word a message goes to, after an addressee
  verb opening a clause ("Ask Thabo whether ...", "remind tomasz to ...", "Invite Sunniva and
  Halvard"), after its gerund ("a note telling Bartek ...") or after a message noun and "to" /
  "for" ("a reply to Zurab"), when it is no dictionary word or a capitalised gazetteer first name;
  and a form field's whole value of two or three capitalised words none of which is a dictionary
  word ("Guardian: Hamid Sadeghi", not "Subject: Quarterly Report"), cut at the line's end where
  NER runs it into the next field's label;
- a capitalised word **no list or dictionary holds** standing as a person: listed with the writer
  ("Thanasis and I") or in a person's role as above ("Giorgos left his jacket");
- a first name or surname **glued to punctuation** that spaCy's tokenizer left in one token
  (``Elena:"I'm``): the name word alone;
- in a capitalised text, a full name typed in lower case: two or three lower-case gazetteer names,
  a first name first and a surname that is no dictionary word last ("for ali reza karimi");
- in a lower-case text, the word after a slot English introduces a name with ("call me",
  "my name is", "named", "called") when it is no dictionary word ("just call me jagódka"), or
  after a writer's "this is" / "it's" when it is also a gazetteer first name ("hi, this is raul
  from flat 4b"), and
  two or more proper nouns in a row that no list holds and no dictionary has ("obinwa ekwueme");

each only where a name can stand: no determiner or number in digits before it ("the Prince
Regent", a street: "14 Milovana Ridge"), no number after it ("Kaplanova 12") and no place or
organisation word in or right after it ("Ivana Station").

A word is name-shaped when it is letters (an inner hyphen or apostrophe allowed) of two or more
letters, not an English stop word, month or weekday, and capitalised — or in lower case when the
whole text is, the pronoun "I" aside (a writer who does not capitalise, :func:`lower_case`). The
words spaCy puts in another entity (a place, a date, a nationality) are never taken. Only a doc with
NER's annotation is read: the detector runs NER on every text whose names could be masked
(``ner_gate``), and a name found here is masked only where NER's would be (the context rule and the
person head decide; a person only this recognizer names needs the detector's
``name_gazetteer_threshold``).

The gazetteer is the first names and surnames of every locale of Faker's person providers (MIT),
single words only, case-folded, the names Faker lists in Greek, Cyrillic, Georgian or Armenian
letters also in Latin ones (:func:`romanisations`: "Γιώργος" as "giorgos", "ქეთევან" as "ketevan";
names written in English are romanised): about 32,000 first names and 32,500 surnames, read once per
process from the list shipped beside the other artefacts (:data:`GAZETTEER`, written from the
installed Faker by ``python -m proxy.guardrails.detectors.privacy_names``), or from Faker's modules
when that list was written from another Faker version; the recognizer also holds each of them
without the diacritics of its Latin letters and looks a word up without them (:func:`unaccented`:
"Anahí" finds "anahi", "Maelle" finds "maëlle"). A word of the English dictionary (the words
of the pipeline's lemmatizer index, :func:`english_words`: "chance", "summer", "will") counts only
capitalised inside a sentence, never in a lower-case text. Cost: ~0.1 ms a text (one pass over the
tokens), beside the ~35 ms of the privacy pass.
"""

from __future__ import annotations

import functools
import importlib
import json
import pkgutil
import re
import unicodedata
from importlib import metadata
from pathlib import Path
from typing import Iterable

from presidio_analyzer import EntityRecognizer, RecognizerResult

from proxy.guardrails.detectors.privacy_context import (
    ADDRESSEE_GERUNDS,
    ADDRESSEE_TO_VERBS,
    ADDRESSEE_VERBS,
    CLAUSE_OPENERS,
    MESSAGE_NOUNS,
    RELATIONS,
)
from proxy.guardrails.detectors.privacy_person import fold_marks

_MESSAGE_NOUNS = frozenset(MESSAGE_NOUNS)

#: Recognizer name of the names standing in a slot the parse shows: a message's addressee
#: (:meth:`NameGazetteerRecognizer._addressed`) or a form field's whole value (``_field_values``).
SLOT = "ParsedNameSlotRecognizer"
#: Longest name reported (tokens), and longest ORG entity read as a name.
MAX_TOKENS = 4
#: A speaker label opening a line of a transcript: "[21:14] Mei:", "Zhang Wei:".
_SPEAKER = re.compile(r"^[ \t]*(?:\[[^\]\n]{1,24}\][ \t]*)?"  # an optional [time] stamp
                      r"([^\W\d_][\w'’-]*(?:[ \t][^\W\d_][\w'’-]*){0,2})[ \t]*:(?!//)", re.MULTILINE)
_INITIAL = re.compile(r"^[^\W\d_]\.?$")
_NAME_WORD = re.compile(r"^[^\W\d_]+(?:['’-][^\W\d_]+)*$")
_CALENDAR = frozenset({"january", "february", "march", "april", "may", "june", "july", "august", "september",
                       "october", "november", "december", "monday", "tuesday", "wednesday", "thursday", "friday",
                       "saturday", "sunday"})
#: Diminutive suffixes of first names (Slavic, Germanic, Romance, English), longest first: a word
#: ending in one is a diminutive when its stem, as is or with a vowel or a letter less, is a
#: first name (:func:`diminutive_of`).
DIMINUTIVE_SUFFIXES = ("ushka", "ochka", "echka", "uschka", "chen", "lein", "enka", "inka", "onka", "uška", "ička",
                       "ečka", "ito", "ita", "ino", "ina", "illo", "illa", "etta", "etto", "ette", "uccia",
                       "uccio", "ka", "ko", "ek", "ik", "ke", "ie", "y")
_STEM_VOWELS = ("", "a", "e", "o", "i")
#: Shortest stem a diminutive suffix may leave.
_MIN_STEM = 3
#: A name word glued to punctuation in one token: ``Elena:"I'm``.
_GLUED = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
#: The gazetteer as :func:`faker_gazetteer` reads it, and the Faker version it was read from
#: (``{"faker": "40.63.0", "first": [...], "last": [...]}``, sorted; :func:`write_gazetteer`).
GAZETTEER = Path(__file__).resolve().parent.parent / "artefacts" / "name-gazetteer.json"
#: Punctuation inside an address, a file name or a number, never between a name and its turn
#: ("files.example.org", "a/b", "x@y", "v2"): such a token holds no glued name.
_ADDRESS_GLUE = re.compile(r"[./@\\_]\w|\d")
#: Most tokens of a form field's label, list markers included ("> * Next of kin:").
_FIELD_LABEL_TOKENS = 6
#: The pronoun "I" alone or contracted ("I'm", "I’ll"): :func:`lower_case` does not count its capital.
_PRONOUN_I = re.compile(r"\bI(?=['’](?:m|d|ll|ve)\b|\b)")
#: Two capitals in a row inside a word: a product or code name ("SQLAlchemy", "iOS"), no person's.
_INNER_CAPITALS = re.compile(r"[A-Z]{2}")
#: Words before a name in a lower-case text: "call me X", "my name is X", "named X", "called X".
_LOWER_SLOTS = (("call", "me"), ("name", "is"), ("named",), ("called",))
#: A writer introducing themself in a lower-case text ("hi, this is raul from flat 4b", "hey it's
#: maria"): a weaker slot than the above, so the word must also be a gazetteer first name.
_INTRODUCTIONS = (("this", "is"), ("it", "'s"), ("it", "’s"))
#: Dependencies that join the items of a list ("Hedda, Greta and Olav").
_LIST = ("conj", "appos")
#: Words that make the proper nouns beside them a place or an organisation, not a person.
_PLACE_WORDS = frozenset({"street", "st", "road", "rd", "avenue", "ave", "lane", "drive", "way", "boulevard", "blvd",
                          "square", "place", "court", "gateway", "bridge", "park", "station", "airport", "port",
                          "hospital", "clinic", "school", "college", "university", "academy", "institute",
                          "church", "cathedral", "museum", "hotel", "bank", "hall", "centre", "center", "tower",
                          "strasse", "straße", "company", "corporation", "corp", "inc", "ltd", "llc", "plc",
                          "gmbh", "group", "foundation",
                          "river", "lake", "mountain", "mount", "island", "county", "city", "village", "valley"})
#: NER labels a rare name is often given instead of ``PERSON``: read as a person by its role.
_ROLE_LABELS = frozenset({"ORG", "GPE", "LOC", "NORP", "FAC"})
#: Nouns of a person seen through a relation, beside the context rule's relation words: a name that is
#: their possessor or in apposition to them is a person ("Ingvild's nephew", "my neighbour Carrow"); the
#: plural too (:func:`_person_noun`: "my sons, Arjun and Vikram").
_PERSON_NOUNS = frozenset({*(w for w in RELATIONS if " " not in w), "kids", "baby", "fiancee", "grandkid",
                           "stepchild", "twin", "mate", "buddy", "pal", "sibling", "ex", "tutor", "coach",
                           "dentist", "vet", "mentor", "assistant", "secretary", "lodger", "guest", "host",
                           "driver", "cleaner"})
#: Verbs of speaking (:func:`_speaker_or_told`): a single word no list or dictionary holds, or that NER
#: calls an organisation or a place, is a person when it is their subject ("Priyamvada said ...") or
#: the object of a verb of telling; the person head still judges it, at ``name_gazetteer_threshold``.
_SPEAKING_VERBS = frozenset({"say", "tell", "ask", "reply", "complain", "explain", "promise", "apologise",
                             "apologize", "whisper", "shout", "mention", "insist", "admit"})
#: Verbs whose object is the person told: :func:`_speaker_or_told`.
_TELLING_VERBS = frozenset({"tell", "ask", "remind", "inform", "thank", "warn"})
#: Relative pronouns of a person: a name with a relative clause opened by one of them is a person.
_PERSON_RELATIVES = frozenset({"who", "whom", "whose"})
#: Possessive pronouns of a person ("her name"): :func:`_a_person_s_name`.
_PERSON_POSSESSIVES = frozenset({"my", "your", "his", "her", "our", "their"})
#: Pronouns that refer to a person, never to an organisation or a place.
_GENDERED = frozenset({"he", "him", "his", "himself", "she", "her", "hers", "herself"})
#: Dependencies of a noun that is an argument of a clause: a noun between a subject and a pronoun
#: that the pronoun could refer to instead.
_ARGUMENTS = frozenset({"nsubj", "nsubjpass", "dobj", "attr", "appos", "pobj", "dative", "conj"})
#: NER labels whose words are never a missed name (a place, a date, a nationality, a number...).
_OTHER_ENTITY = frozenset({"GPE", "LOC", "FAC", "NORP", "DATE", "TIME", "EVENT", "LANGUAGE", "LAW", "MONEY",
                           "ORDINAL", "CARDINAL", "PERCENT", "PRODUCT", "QUANTITY", "WORK_OF_ART"})


def lower_case(text: str) -> bool:
    """True when ``text`` is written in lower case: no capital letter but the pronoun "I" ("how do I
    ask my friend dagny ..."; a phone capitalises that one for a writer who capitalises nothing
    else)."""
    return not any(c.isupper() for c in _PRONOUN_I.sub("", text))


def english_words(nlp, parts: Iterable[str] = ("noun", "verb", "adj", "adv")) -> frozenset[str]:
    """The words of the pipeline's rule lemmatizer's index (WordNet's, lower case: "karma",
    "chance", "summer") for the parts of speech ``parts`` (its table names: noun, verb, adj, adv;
    WordNet's nouns hold names too, "john", "ibrahim"); empty for another kind of lemmatizer."""
    from spacy.strings import get_string_id

    try:
        index = nlp.get_pipe("lemmatizer").lookups.get_table("lemma_index")
    except (KeyError, AttributeError):
        return frozenset()
    keys = {get_string_id(part) for part in parts}
    return frozenset(w for key, words in index.items() if key in keys for w in words)


_POSSESSIVE = re.compile(r"['’]s$")


def in_dictionary(word: str, words: frozenset[str]) -> bool:
    """``word`` (case-folded) is a dictionary word of ``words`` or the plural of one ("hoes")."""
    return word in words or (word.endswith("s") and word[:-1] in words)


def full_name(first_word: str, last_word: str, words: frozenset[str]) -> bool:
    """``first_word`` ... ``last_word`` (case-folded) read as a full name typed in lower case: a
    gazetteer first name, then a gazetteer surname that is no dictionary word (:func:`in_dictionary`)
    ("maria garcia", not "dee hoes")."""
    first, last = gazetteer()
    return first_word in first and last_word in last and not in_dictionary(last_word, words)


def could_name_a_person(span: str, words: frozenset[str], first: frozenset[str], last: frozenset[str]) -> bool:
    """False when every word of ``span`` (a candidate ``PERSON`` span's text) is an English
    dictionary word of ``words`` and none is a first name of ``first`` or a surname of ``last``
    (all case-folded; a possessive ending is dropped): a greeting, a verb or a common noun in a
    slot where a name could stand ("Customer: Hello, ...", "Student: Excuse me"). A span with no
    letters is kept (nothing to judge), as is one with any word outside the dictionary or in the
    gazetteer ("Rose", "Baker", "Oyelaran's")."""
    folded = [_POSSESSIVE.sub("", w).casefold() for w in _GLUED.findall(span)]
    if not folded or not words:
        return True
    return any(w not in words or w in first or w in last for w in folded)


def diminutive_of(word: str, first: frozenset[str]) -> str | None:
    """The first name of ``first`` (case-folded) that ``word`` is a diminutive of, or None: its
    stem before a :data:`DIMINUTIVE_SUFFIXES` suffix, as is, with a vowel added or with a doubled
    last letter undone, is a first name ("marzenka" → "marzena", "juanito" → "juan", "freddy" →
    "fred"); the stem keeps at least :data:`_MIN_STEM` letters."""
    folded = word.casefold()
    for suffix in DIMINUTIVE_SUFFIXES:
        stem = folded.removesuffix(suffix)
        if stem == folded or len(stem) < _MIN_STEM:
            continue
        stems = [stem, stem[:-1]] if len(stem) > _MIN_STEM and stem[-1] == stem[-2] else [stem]
        for base in (s + vowel for s in stems for vowel in _STEM_VOWELS):
            if base in first:
                return base
    return None


_ARMENIAN = dict(zip("աբգդեզէըթժիլխծկհձղճմյնշոչպջռսվտրցւփքօֆ",
                     ["a", "b", "g", "d", "e", "z", "e", "y", "t", "zh", "i", "l", "kh", "ts", "k", "h", "dz", "gh",
                      "ch", "m", "y", "n", "sh", "o", "ch", "p", "j", "r", "s", "v", "t", "r", "ts", "v", "p", "k",
                      "o", "f"]))
#: Letters of the scripts whose names Faker lists unromanised, in two readings each ("common" and
#: "formal", same length as the pairs): Greek (ELOT 743 and the spelling names are usually given
#: in: η, υ, ει, οι as "i"), Cyrillic (BGN/PCGN and the passport reading), Georgian (national
#: system) and Armenian (one reading). Digraphs come first; a word with any other letter is not romanised.
_ROMAN = {
    "greek": ((("ου", "ou", "ou"), ("αι", "ai", "e"), ("ει", "ei", "i"), ("οι", "oi", "i"), ("γγ", "ng", "ng"),
               ("γκ", "gk", "g"), ("μπ", "mp", "b"), ("ντ", "nt", "d"), ("τζ", "tz", "tz"), ("αυ", "av", "af"),
               ("ευ", "ev", "ef")),
              dict(zip("αβγδεζηθικλμνξοπρσςτυφχψωϊϋ",
                       ["a", "v", "g", "d", "e", "z", "i", "th", "i", "k", "l", "m", "n", "x", "o", "p", "r", "s",
                        "s", "t", "y", "f", "ch", "ps", "o", "i", "y"])),
              dict(zip("αβγδεζηθικλμνξοπρσςτυφχψωϊϋ",
                       ["a", "v", "g", "d", "e", "z", "i", "th", "i", "k", "l", "m", "n", "ks", "o", "p", "r", "s",
                        "s", "t", "i", "f", "h", "ps", "o", "i", "i"]))),
    "cyrillic": ((("ий", "iy", "y"), ("ый", "yy", "y")),
                 dict(zip("абвгґдђеёєжзѕиіїйјклљмнњопрстћуфхцчџшщъыьэюя",
                          ["a", "b", "v", "g", "g", "d", "dj", "e", "e", "ye", "zh", "z", "dz", "i", "i", "yi", "y",
                           "j", "k", "l", "lj", "m", "n", "nj", "o", "p", "r", "s", "t", "c", "u", "f", "kh", "ts",
                           "ch", "dzh", "sh", "shch", "", "y", "", "e", "yu", "ya"])),
                 dict(zip("абвгґдђеёєжзѕиіїйјклљмнњопрстћуфхцчџшщъыьэюя",
                          ["a", "b", "v", "h", "g", "d", "d", "e", "yo", "ie", "zh", "z", "z", "i", "i", "i", "i",
                           "j", "k", "l", "l", "m", "n", "n", "o", "p", "r", "s", "t", "c", "u", "f", "h", "ts",
                           "ch", "j", "sh", "sht", "a", "i", "", "e", "iu", "ia"]))),
    "georgian": ((),
                 dict(zip("აბგდევზთიკლმნოპჟრსტუფქღყშჩცძწჭხჯჰ",
                          ["a", "b", "g", "d", "e", "v", "z", "t", "i", "k", "l", "m", "n", "o", "p", "zh", "r", "s",
                           "t", "u", "p", "k", "gh", "q", "sh", "ch", "ts", "dz", "ts", "ch", "kh", "j", "h"])),
                 dict(zip("აბგდევზთიკლმნოპჟრსტუფქღყშჩცძწჭხჯჰ",
                          ["a", "b", "g", "d", "e", "v", "z", "t", "i", "k", "l", "m", "n", "o", "p", "zh", "r", "s",
                           "t", "u", "f", "k", "g", "k", "sh", "ch", "ts", "dz", "ts", "ch", "kh", "j", "h"]))),
    "armenian": ((("ու", "u", "u"), ("և", "ev", "ev")),
                 _ARMENIAN, _ARMENIAN),
}


#: Accents dropped before romanising (Greek tonos; a breve or diaeresis stays: "й", "ё", "ϊ").
_ACCENTS = frozenset("\u0300\u0301")


def romanisations(word: str) -> frozenset[str]:
    """The Latin spellings of ``word`` (a name in Greek, Cyrillic, Georgian or Armenian letters,
    any case, accents ignored) by :data:`_ROMAN`'s two readings of its script: "Γιώργος" →
    {"giorgos"}, "Θανάσης" → {"thanasis"}, "ქეთევან" → {"ketevan"}; empty for a word in another
    script or with a letter outside the tables. Case-folded, letters a-z only."""
    folded = unicodedata.normalize("NFC", "".join(c for c in unicodedata.normalize("NFD", word.casefold())
                                                  if c not in _ACCENTS))
    for digraphs, common, formal in _ROMAN.values():
        if not all(c in common for c in folded if not any(c in d for d, _, _ in digraphs)):
            continue
        spellings = set()
        for reading, table in ((1, common), (2, formal)):
            out, i = [], 0
            while i < len(folded):
                pair = next((d for d in digraphs if folded.startswith(d[0], i)), None)
                if pair is not None:
                    out.append(pair[reading])
                    i += len(pair[0])
                elif folded[i] in table:
                    out.append(table[folded[i]])
                    i += 1
                else:
                    break
            else:
                spellings.add("".join(out))
        return frozenset(w for w in spellings if len(w) >= 2)
    return frozenset()


@functools.cache
def gazetteer() -> tuple[frozenset[str], frozenset[str]]:
    """(first names, surnames): :func:`read_gazetteer` of :data:`GAZETTEER`, once per process."""
    return read_gazetteer()


def unaccented(word: str) -> str:
    """``word`` (any Unicode normal form) without the combining marks on its a-z letters: "anahí" →
    "anahi", "maëlle" → "maelle", "żółć" → "zołc" (ł is a letter of its own); Greek, Cyrillic and
    other scripts unchanged (:func:`~.privacy_person.fold_marks` of its composed form)."""
    return word if word.isascii() else fold_marks(unicodedata.normalize("NFC", word))


def _with_unaccented(names: frozenset[str]) -> frozenset[str]:
    """``names`` and the :func:`unaccented` form of each."""
    return names | {unaccented(name) for name in names if not name.isascii()}


def read_gazetteer(path: Path = GAZETTEER) -> tuple[frozenset[str], frozenset[str]]:
    """(first names, surnames): :func:`faker_gazetteer`, read from ``path`` when that was written
    from the installed Faker version (no Faker module imported: ~0.3 s and ~11 MB of provider lists
    spared at start-up), else (another version, no file) from Faker's modules."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["faker"] == metadata.version("faker"):
            return frozenset(record["first"]), frozenset(record["last"])
    except (OSError, ValueError, KeyError, TypeError, metadata.PackageNotFoundError):
        pass
    return faker_gazetteer()


def faker_gazetteer() -> tuple[frozenset[str], frozenset[str]]:
    """(first names, surnames), case-folded single words, of every locale of Faker's person providers:
    every list of a provider whose name ends in ``names`` and says ``first`` or ``middle`` (first
    names) or ``last`` (surnames), romanised lists included ("first_names_female",
    "unisex_last_names", "last_romanized_names")."""
    import faker.providers.person as person

    first: set[str] = set()
    last: set[str] = set()
    for module in pkgutil.iter_modules(person.__path__):
        provider = getattr(importlib.import_module(f"{person.__name__}.{module.name}"), "Provider", None)
        for attribute in dir(provider):
            into = first if "first" in attribute or "middle" in attribute else last if "last" in attribute else None
            values = getattr(provider, attribute, None)
            if into is not None and attribute.endswith("names") and isinstance(values, (list, tuple, dict)):
                # a dict (OrderedDict of name -> weight) in some locales
                into.update(v.casefold() for v in values if isinstance(v, str) and _NAME_WORD.match(v))
    return frozenset(_romanised(first)), frozenset(_romanised(last))


def _romanised(names: set[str]) -> set[str]:
    """``names`` with the :func:`romanisations` of each one added."""
    return names | {w for name in names for w in romanisations(name)}


def write_gazetteer(path: Path = GAZETTEER) -> Path:
    """Write :func:`faker_gazetteer` and the installed Faker version to ``path`` (JSON, sorted
    lists, one line); returns ``path``. Raises ImportError when Faker is not installed."""
    first, last = faker_gazetteer()
    record = {"faker": metadata.version("faker"), "first": sorted(first), "last": sorted(last)}
    path.write_text(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    return path


def _speaker_or_told(token) -> bool:
    """``token`` is the subject of a verb of speaking (:data:`_SPEAKING_VERBS`) or the one a verb of
    telling tells (:data:`_TELLING_VERBS`: "I told Ximena that ...")."""
    lemma = token.head.lemma_.lower()
    return (token.dep_ == "nsubj" and lemma in _SPEAKING_VERBS
            or token.dep_ in ("dobj", "dative") and lemma in _TELLING_VERBS)


def _a_person_s_name(token) -> bool:
    """``token`` is "name" owned by a person: "her name", "the patient's name" (not "the company's name")."""
    return token.lower_ == "name" and any(c.dep_ == "poss" and (c.lower_ in _PERSON_POSSESSIVES or _person_noun(c))
                                          for c in token.children)


def _person_noun(token) -> bool:
    """``token`` is one of :data:`_PERSON_NOUNS`, in the singular or the plural ("daughters",
    "grandchildren": spaCy's lemma)."""
    return token.lower_ in _PERSON_NOUNS or token.lemma_.lower() in _PERSON_NOUNS


def _conjuncts(entity) -> list:
    """The parts of the spaCy span ``entity`` between its coordinating words and commas ("Arjun and
    Vikram" -> "Arjun", "Vikram"; "&" too), each a span; ``[entity]`` when it has none."""
    cuts = [t.i for t in entity if t.pos_ == "CCONJ" or t.text in (",", "&")]
    if not cuts:
        return [entity]
    doc, bounds = entity.doc, [entity.start - 1, *cuts, entity.end]
    return [doc[a + 1:b] for a, b in zip(bounds, bounds[1:]) if b > a + 1]


class NameGazetteerRecognizer(EntityRecognizer):
    """presidio recognizer of the person names spaCy's NER missed (module docstring); results
    of type ``PERSON`` with score ``score``, below NER's so a name NER found keeps its span."""

    NAME = "NameGazetteerRecognizer"

    def __init__(self, supported_language: str = "en", score: float = 0.6, words: Iterable[str] = ()):
        from spacy.lang.en.stop_words import STOP_WORDS

        self.score = score
        #: Score of a person read by its role (above NER's 0.85: the role wins over NER's place label).
        self.role_score = max(score, 0.86)
        self._words = frozenset(words)
        self._skip = frozenset(STOP_WORDS) | _CALENDAR
        first, last = gazetteer()
        # each name also without its diacritics, so that it is found however its accents are typed
        self._first, self._last = _with_unaccented(first), _with_unaccented(last)
        super().__init__(supported_entities=["PERSON"], name=self.NAME,
                         supported_language=supported_language)

    def load(self) -> None:
        """Nothing to load (presidio's recognizer interface; the gazetteer is read at construction)."""

    def analyze(self, text: str, entities: list[str], nlp_artifacts=None) -> list[RecognizerResult]:
        """``PERSON`` results for the missed names of the tagged doc of ``nlp_artifacts``; [] when
        it has no NER annotation or PERSON is not asked for."""
        doc = getattr(nlp_artifacts, "tokens", None)
        if ("PERSON" not in entities or doc is None or not doc.has_annotation("TAG")
                or not doc.has_annotation("ENT_IOB")):
            return []
        lower = lower_case(text)
        names, role_names, slot_names = self._names(doc, lower)
        if lower:
            covered = {i for a, b in names for i in range(a, b)}
            names += [(a, b) for a, b in self._slotted(doc) if not covered & set(range(a, b))]
        def chars(a: int, b: int) -> tuple[int, int]:  # token range -> character range
            return doc[a:b].start_char, doc[a:b].end_char

        spans = [chars(a, b) for a, b in names] + self._glued(doc)
        slots = {chars(a, b) for a, b in slot_names}
        scored_as_roles = slots | {chars(a, b) for a, b in role_names}
        return [RecognizerResult("PERSON", start, end,
                                 self.role_score if (start, end) in scored_as_roles else self.score,
                                 recognition_metadata={
                                     RecognizerResult.RECOGNIZER_NAME_KEY: SLOT if (start, end) in slots
                                     else self.name,  # type: ignore[has-type]
                                     RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id})
                for start, end in sorted(set(spans))]

    def _speakers(self, doc, persons: set[int]) -> list[tuple[int, int]]:
        """Token ``[start, end)`` of the speaker labels of a transcript: a run of one to three
        capitalised words opening a line (after a ``[time]`` stamp, if any) and followed by a colon,
        none of them a dictionary or stop word ("Customer:", "Subject:" are fields), in a text where
        two or more lines open so and one of the labels is a person's name (NER's, or every word of
        it in the gazetteer)."""
        labels = []
        for match in _SPEAKER.finditer(doc.text):
            span = doc.char_span(*match.span(1))
            if span is not None:
                labels.append(span)
        if len(labels) < 2 or not any(set(range(s.start, s.end)) & persons
                                      or all(self._known(t.lower_) for t in s) for s in labels):
            return []
        return [(s.start, s.end) for s in labels
                if all(t.lower_ not in self._words and t.lower_ not in self._skip for t in s)]

    def _known(self, word: str) -> bool:
        """``word`` (case-folded) is a gazetteer first name or surname, or a diminutive of a first
        name that is no dictionary word."""
        plain = unaccented(word)
        return (plain in self._first or plain in self._last
                or word not in self._words and diminutive_of(word, self._first) is not None)

    def _glued(self, doc) -> list[tuple[int, int]]:
        """Character ``[start, end)`` of the first names and surnames glued to punctuation inside one
        token (``Elena:"I'm``): a capitalised name-shaped word of the gazetteer, in a token NER did
        not call a person and that is no address, file name or number (:data:`_ADDRESS_GLUE`); no
        dictionary word, unless a first name before a colon (a speaker's turn in a transcript:
        ``Victoria:"Yes"``)."""
        found = []
        for token in doc:
            text = token.text
            if (token.ent_type_ == "PERSON" or _NAME_WORD.match(text) or not any(c.isalpha() for c in text)
                    or token.like_url or token.like_email or _ADDRESS_GLUE.search(text)):
                continue
            for match in _GLUED.finditer(text):
                word = match.group()
                folded = word.casefold()
                speaker = text[match.end():match.end() + 1] == ":" and folded in self._first
                if (len(word) >= 2 and word[0].isupper() and not word.isupper()
                        and folded not in self._skip and (folded not in self._words or speaker)
                        and (folded in self._first or folded in self._last)):
                    found.append((token.idx + match.start(), token.idx + match.end()))
        return found

    def _slotted(self, doc) -> list[tuple[int, int]]:
        """Token ``[start, end)`` of the words after a name slot of a lower-case text ("call me X",
        "my name is X"): one word, or two when the second is no dictionary word either; letters
        only, no stop word, no dictionary word."""
        def free(j: int) -> bool:
            return (j < len(doc) and doc[j].is_alpha and len(doc[j]) >= 2 and doc[j].lower_ not in self._skip
                    and doc[j].lower_ not in self._words)

        found = []
        for slot in (*_LOWER_SLOTS, *_INTRODUCTIONS):
            n = len(slot)
            for i in range(len(doc) - n):
                if (tuple(t.lower_ for t in doc[i:i + n]) == slot and free(i + n)
                        and (slot in _LOWER_SLOTS or unaccented(doc[i + n].lower_) in self._first)):
                    end = i + n + 1
                    if end < len(doc) and free(end) and doc[end - 1].whitespace_:
                        end += 1
                    found.append((i + n, end))
        return found

    def _addressed(self, doc, lower: bool) -> list[tuple[int, int]]:
        """Token ``[start, end)`` of the names a message goes to: the word after an addressee verb
        opening a clause ("Ask Thabo whether ...", "remind tomasz to ...", after punctuation or a
        :data:`~.privacy_context.CLAUSE_OPENERS` word: "can you tell priya ..."), after its gerund
        ("a note telling Bartek ..."), after a message noun and "to"/"for" ("a reply to Zurab", "a
        welcome post for Anouk": :data:`~.privacy_context.MESSAGE_NOUNS`) or
        after a verb of speaking or writing and "to" ("respond to Tevita"),
        with the proper nouns right after it (:meth:`_extent`). The word is name-shaped
        (:meth:`_shaped`, no inner run of capitals: "SQLAlchemy") and no dictionary word, unless a
        capitalised gazetteer first name ("Marguerite")."""
        found = []
        for token in doc[1:]:
            i = token.i
            before = doc[i - 1]
            verb = before.lower_ in ADDRESSEE_VERBS and (self._opens(doc, i - 1) or i > 1
                                                        and doc[i - 2].lower_ in CLAUSE_OPENERS)
            note = i > 1 and (before.lower_ in ("to", "for") and doc[i - 2].lower_ in _MESSAGE_NOUNS
                              or before.lower_ == "to" and doc[i - 2].lower_ in ADDRESSEE_TO_VERBS)
            if not (verb or note or before.lower_ in ADDRESSEE_GERUNDS) or not self._shaped(token, lower):
                continue
            folded = token.lower_
            if _INNER_CAPITALS.search(token.text) or folded in self._words and (lower or folded not in self._first):
                continue
            found.append(self._extent(doc, i, lower, set()))
        return found

    @staticmethod
    def _with_writer(doc, i: int) -> bool:
        """Token ``i`` is listed with the writer: "Thanasis and I", "me and Thanasis" (read from the
        words: the parser often takes a rare name opening a sentence for the root)."""
        words = [t.lower_ for t in doc[max(0, i - 2):i + 3]]
        at = min(i, 2)
        return words[at + 1:at + 3] in (["and", "i"], ["and", "me"]) or at == 2 and words[:2] in (["me", "and"],
                                                                                                 ["i", "and"])

    def _common(self, token) -> bool:
        """``token``'s word or lemma is a dictionary word and no gazetteer first name or surname."""
        folded = token.lower_
        return (folded in self._words or token.lemma_.lower() in self._words) and not (
            folded in self._first or folded in self._last)

    def _field_values(self, doc) -> list[tuple[int, int]]:
        """Token ``[start, end)`` of the full names that are a form field's whole value: a line of a
        label of one to three words (the first capitalised), a colon and two or three capitalised
        name-shaped words up to the line's end ("Guardian: Hamid Sadeghi"), none of them a dictionary
        word (its lemma either) that is no gazetteer name ("Subject: Quarterly Report", "Assignee:
        Backend Team")."""
        found = []
        for colon in doc:
            if colon.text != ":" or not colon.i:
                continue
            start = colon.i  # at most one token past the longest label or value is read: bounded work
            while (start and colon.i - start <= _FIELD_LABEL_TOKENS and not doc[start - 1].is_space
                   and "\n" not in doc[start - 1].whitespace_):
                start -= 1
            label = [t for t in doc[start:colon.i] if t.text not in (">", "*", "-")]
            end = colon.i + 1
            while (end < len(doc) and end - colon.i <= 3 and not doc[end].is_space
                   and "\n" not in doc[end - 1].whitespace_):
                end += 1
            value = doc[colon.i + 1:end]
            if (colon.i - start > _FIELD_LABEL_TOKENS or not 1 <= len(label) <= 3
                    or not label[0].text[:1].isupper() or not all(t.is_alpha for t in label)
                    or not 2 <= len(value) <= 3 or not all(self._shaped(t, False) for t in value)
                    or any(self._common(t) for t in value)):
                continue
            found.append((value.start, value.end))
        return found

    def _unknown_runs(self, doc, lower: bool, blocked: set[int]) -> list[tuple[int, int]]:
        """Token ``[start, end)`` of each run of two to :data:`MAX_TOKENS` name-shaped proper nouns
        that are no dictionary word, outside ``blocked``, joined by spaces ("obinwa ekwueme")."""
        runs: list[tuple[int, int]] = []
        start = None
        for token in [*doc, None]:
            fits = (token is not None and token.i not in blocked and token.pos_ == "PROPN"
                    and self._shaped(token, lower) and token.lower_ not in self._words)
            joined = fits and start is not None and token.i - start < MAX_TOKENS and doc[token.i - 1].whitespace_
            if joined:
                continue
            if start is not None and token is not None and token.i - start >= 2:
                runs.append((start, token.i))
            elif start is not None and token is None and len(doc) - start >= 2:
                runs.append((start, len(doc)))
            start = token.i if fits else None
        return runs

    def _lower_case_names(self, doc, blocked: set[int]) -> list[tuple[int, int]]:
        """Token ``[start, end)`` of each run of two or three lower-case words outside ``blocked``,
        joined by spaces, that reads as a full name: gazetteer names, no stop word, the first and
        the last a :func:`full_name`."""
        def name_word(j: int) -> bool:
            token = doc[j]
            return (j not in blocked and token.is_alpha and token.is_lower and len(token) >= 2
                    and token.lower_ not in self._skip and self._known(token.lower_))

        runs = []
        i = 0
        while i < len(doc):
            end = i
            while end < len(doc) and end - i < 3 and name_word(end) and (end == i or doc[end - 1].whitespace_):
                end += 1
            if end - i >= 2 and full_name(doc[i].lower_, doc[end - 1].lower_, self._words):
                runs.append((i, end))
                i = end
            else:
                i += 1
        return runs

    def _proper(self, token, lower: bool) -> bool:
        """``token`` is tagged a proper noun, or, outside a lower-case text, a common noun that is a
        gazetteer first name and no dictionary word (the tagger calls a rare name opening a sentence
        a noun: "Björn forgot his lunch box"; :meth:`_shaped`, asked beside this, wants it capitalised)."""
        return token.pos_ == "PROPN" or (not lower and token.pos_ == "NOUN"
                                         and token.lower_ in self._first and token.lower_ not in self._words)

    def _shaped(self, token, lower: bool) -> bool:
        """A word that may be part of a name (module docstring)."""
        word = token.text
        return (len(word) >= 2 and _NAME_WORD.match(word) is not None and token.lower_ not in self._skip
                and (word[0].isupper() and not word.isupper() or lower and word.islower()))

    def _extent(self, doc, i: int, lower: bool, blocked: set[int]) -> tuple[int, int]:
        """[start, end) of the name around token ``i``: the name-shaped proper nouns right before and
        after it, and an initial between two of them ("Ana M. Dimitrova"); at most :data:`MAX_TOKENS`."""
        def part(j: int) -> bool:
            return (0 <= j < len(doc) and j not in blocked and doc[j].pos_ == "PROPN"
                    and self._shaped(doc[j], lower))

        start, end = i, i + 1
        while start and end - start < MAX_TOKENS and doc[start - 1].whitespace_ and part(start - 1):
            start -= 1
        while end - start < MAX_TOKENS and end < len(doc) and doc[end - 1].whitespace_:
            if part(end):
                end += 1
            elif (end - start + 2 <= MAX_TOKENS and _INITIAL.match(doc[end].text) and doc[end].text[0].isupper()
                  and doc[end].whitespace_ and part(end + 1)):
                end += 2
            else:
                break
        return start, end

    @staticmethod
    def _opens(doc, i: int) -> bool:
        """Token ``i`` opens a sentence, a line or a clause (where any word may be capitalised)."""
        return i == 0 or doc[i].is_sent_start or doc[i - 1].is_punct or doc[i - 1].is_space

    def _fits(self, doc, start: int, end: int) -> bool:
        """Tokens ``[start, end)`` can be a person's name where they stand: no determiner or house
        number before them ("the Prince Regent", "14 Milovana Ridge"), no number after them
        ("Kaplanova 12") and no place or organisation word in or right after them ("Ivana Station")."""
        if start and (doc[start - 1].pos_ == "DET" or doc[start - 1].is_digit):
            return False
        if end < len(doc) and doc[end].like_num:
            return False
        return not any(t.lower_.rstrip(".") in _PLACE_WORDS for t in doc[start:end + 1])

    def _person_role(self, doc, entity) -> bool:
        """The entity ``entity`` (a span of ``doc``) stands where a person stands (module docstring):
        possessor of a person noun, in apposition to one (either way), the head of a "who" clause,
        what a person noun or a person's name is, a message's sender ("the invitation from X"), or
        subject of its clause with a gendered pronoun after it in the same or the next sentence and
        no noun argument between."""
        root = entity.root
        head = root.head
        if root.dep_ == "conj" and head.i < root.i and head.pos_ == "PROPN":  # "my sons, Arjun and Vikram"
            return self._person_role(doc, doc[head.i:head.i + 1])
        if root.dep_ == "poss" and _person_noun(head):
            return True
        if root.dep_ in ("appos", "compound", "npadvmod") and _person_noun(head) and head.pos_ != "VERB":
            return True
        if any(c.dep_ == "appos" and _person_noun(c) for c in root.children):
            return True
        if any(c.dep_ == "relcl" and any(t.lower_ in _PERSON_RELATIVES for t in c.children) for c in root.children):
            return True  # "Anouk, who joins the choir": places and organisations take "which"
        if root.dep_ == "attr" and any(c.dep_ == "nsubj" and (_person_noun(c) or _a_person_s_name(c))
                                       for c in head.children):
            return True  # "The patient's name was Amaru Quispe", "The new tenant is Carrow"
        if entity.start and _person_noun(doc[entity.start - 1]) and doc[entity.start - 1].pos_ != "VERB":
            return True
        if (entity.start > 1 and doc[entity.start - 1].lower_ == "from"
                and doc[entity.start - 2].lower_ in _MESSAGE_NOUNS):
            return True  # the sender of a message: "the wedding invitation from Brigid"
        if root.dep_ not in ("nsubj", "nsubjpass"):
            return False
        sentences = 0
        for token in doc[entity.end:]:
            if token.is_sent_start:
                sentences += 1
                if sentences > 1:
                    return False
            if token.lower_ in _GENDERED and token.pos_ == "PRON":
                return True
            if token.pos_ in ("NOUN", "PROPN") and token.dep_ in _ARGUMENTS or token.ent_type_ == "PERSON":
                return False
        return False

    def _unlisted_person(self, doc, token, lower: bool) -> bool:
        """``token`` is a name-shaped proper or common noun that no list or dictionary holds (no
        inner run of capitals) and stands as a person: listed with the writer (:meth:`_with_writer`),
        in a person's role (:meth:`_person_role`), or speaking or told (:func:`_speaker_or_told`)."""
        return (token.pos_ in ("PROPN", "NOUN") and self._shaped(token, lower) and not self._common(token)
                and not _INNER_CAPITALS.search(token.text)
                and (self._with_writer(doc, token.i) or self._person_role(doc, doc[token.i:token.i + 1])
                     or _speaker_or_told(token)))

    def _slots(self, doc, lower: bool) -> list[tuple[int, int]]:
        """Token ``[start, end)`` of the names in a slot the parse shows, disjoint, in order: an
        addressee's (:meth:`_addressed`) unless NER put it in an entity other than a place, an
        organisation or a group (a rare name's usual labels) or a person run into the verb before it
        ("Warn Levan"), and a form field's value (:meth:`_field_values`) unless NER put it in an entity
        other than a person or an organisation; each where a name can stand (:meth:`_fits`)."""
        held = {t.i for e in doc.ents if e.label_ not in _ROLE_LABELS
                and not (e.label_ == "PERSON" and e[0].lower_ in ADDRESSEE_VERBS) for t in e}
        places = {t.i for e in doc.ents if e.label_ not in ("PERSON", "ORG") for t in e}
        slots: list[tuple[int, int]] = []
        taken: set[int] = set()
        for spans, blocked in ((self._addressed(doc, lower), held), (self._field_values(doc), places)):
            for start, end in spans:
                inside = set(range(start, end))
                if not inside & (blocked | taken) and self._fits(doc, start, end):
                    slots.append((start, end))
                    taken |= inside
        return sorted(slots)

    def _names(self, doc, lower: bool) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]]]:
        """[start, end) token ranges of the missed names of ``doc``, in order, disjoint; those
        of them read as a person by their role (:meth:`_person_role`); and those in a slot the parse
        shows (:meth:`_slots`)."""
        persons = {t.i for e in doc.ents if e.label_ == "PERSON" for t in e}
        orgs = {t.i for e in doc.ents if e.label_ == "ORG" for t in e}
        taken = persons | {t.i for e in doc.ents if e.label_ in _OTHER_ENTITY for t in e}
        found: list[tuple[int, int]] = []
        roles: list[tuple[int, int]] = []

        def add(start: int, end: int) -> None:
            found.append((start, end))
            taken.update(range(start, end))

        for entity in doc.ents:  # an organisation that is a first name and a name-shaped word or two
            for part in _conjuncts(entity) if entity.label_ == "ORG" else ():  # each of "Arjun and Vikram"
                first = part[0].lower_
                if (len(part) <= MAX_TOKENS
                        and (unaccented(first) in self._first
                             or first not in self._words and diminutive_of(first, self._first))
                        and all(self._shaped(t, lower) for t in part) and self._fits(doc, part.start, part.end)):
                    add(part.start, part.end)
        for entity in doc.ents:  # a rare name NER calls an organisation or a place, standing as a person
            if (entity.label_ in _ROLE_LABELS and len(entity) < MAX_TOKENS
                    and not (persons | {i for a, b in found for i in range(a, b)}) & set(range(entity.start, entity.end))
                    and all(_NAME_WORD.match(t.text) and t.text[0].isupper() and not t.text.isupper()
                            and t.lower_ not in self._skip for t in entity)
                    and not (len(entity) == 1 and entity[0].lower_ in self._words)
                    and self._fits(doc, entity.start, entity.end)
                    and (self._person_role(doc, entity)
                         or len(entity) == 1
                         and (_speaker_or_told(entity[0]) or self._with_writer(doc, entity.start)))):
                add(entity.start, entity.end)
                roles.append((entity.start, entity.end))
        for token in doc:  # a word no list or dictionary holds, standing as a person: "Giorgos left his keys"
            if token.i not in taken and token.i not in orgs and self._unlisted_person(doc, token, lower):
                start, end = self._extent(doc, token.i, lower, taken | orgs)
                if self._fits(doc, start, end):
                    add(start, end)
                    roles.append((start, end))
        seen: set[int] = set()
        # a surname NER gave a label of its own ("Emeka Nwosu": Nwosu an organisation) joins the name before it
        surnames = {e.start for e in doc.ents if len(e) == 1 and e.label_ in _ROLE_LABELS and e.start not in persons
                    and e[0].lower_ in self._last and e[0].lower_ not in self._words}
        for token in doc:  # a first name, surname or diminutive, with the proper nouns and initials around it
            i = token.i
            if (i in seen or i in taken or i in orgs or not self._proper(token, lower) or not self._shaped(token, lower)
                    or not self._known(token.lower_)
                    or token.lower_ in self._words and (lower or self._opens(doc, i))):
                continue
            start, end = self._extent(doc, i, lower, (taken | orgs) - {j for j in surnames if j > i})
            seen.update(range(start, end))  # a run that is no name ("the Prince Regent") gives no name either
            if self._fits(doc, start, end):
                add(start, end)
                if surnames & set(range(start, end)):  # scored as a role: it wins over NER's label of the surname
                    roles.append((start, end))
        for start, end in self._speakers(doc, persons):  # a transcript's speakers: "[09:02] Efua: no, ..."
            if not set(range(start, end)) & (persons | {i for a, b in found for i in range(a, b)}):
                add(start, end)
                roles.append((start, end))
        slots = self._slots(doc, lower)  # they win over the names found above where they overlap
        for start, end in slots:
            found[:] = [(a, b) for a, b in found if b <= start or a >= end]
            add(start, end)
        if lower:  # a full name of words no list holds: two or more unknown proper nouns in a row
            for a, b in self._unknown_runs(doc, lower, taken | orgs):
                if self._fits(doc, a, b):
                    add(a, b)
        else:  # a full name typed in lower case in a capitalised text: "the parcel for ali reza karimi"
            for a, b in self._lower_case_names(doc, taken | orgs):  # taken holds every name added
                if self._fits(doc, a, b):
                    add(a, b)
        names = {i for a, b in found for i in range(a, b)}
        names.update(t.i for e in doc.ents if e.label_ == "PERSON" and self._fits(doc, e.start, e.end) for t in e)
        for token in doc:  # a proper noun in a list with a name
            listed = (token.dep_ in _LIST and token.head.i in names
                      or any(c.dep_ in _LIST and c.i in names for c in token.children))
            if (listed and token.i not in taken and token.pos_ == "PROPN" and self._shaped(token, lower)
                    and self._fits(doc, token.i, token.i + 1)):
                add(token.i, token.i + 1)
        return sorted(found), roles, slots


if __name__ == "__main__":
    print(write_gazetteer())
