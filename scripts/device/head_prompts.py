"""Prompts for training an EAGLE head on a chat target, made offline from what ships with Python.

Nine kinds: the eight kinds of task a chat benchmark asks (writing, roleplay, reasoning, math,
coding, extraction, STEM, humanities) and the questions about standard-library docstrings the
first head was trained on (``docstring``). Each kind fills its own templates from seeded
numbers, small slot lists (personas, formats, lengths, tones, concepts) and the standard
library itself (docstrings, function sources, ``keyword``/``unicodedata`` names, installed
packages' summaries). No benchmark question is read here: they are the evaluation.

    make_prompts(n, seed, mix=parse_mix("writing=2,math=1"))  -> [(kind, prompt), ...]
"""
import ast
import importlib.metadata
import keyword
import os
import random
import sysconfig
import unicodedata

KINDS = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities", "docstring")
DEFAULT_MIX = ",".join(f"{k}=1" for k in KINDS)


# --------------------------------------------------------------------------- sources
def _first_paragraph(doc: str, limit: int = 600) -> str:
    para = doc.strip().split("\n\n", 1)[0]
    return " ".join(para.split())[:limit]


def _stdlib_trees(max_files):
    root = sysconfig.get_paths()["stdlib"]
    files = sorted(f for f in os.listdir(root) if f.endswith(".py") and not f.startswith("_"))
    for f in files[:max_files]:
        try:
            with open(os.path.join(root, f), encoding="utf-8") as fh:
                text = fh.read()
            yield f[:-3], text, ast.parse(text)
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue


def stdlib_snippets(max_files: int | None = None) -> list[tuple[str, str, str]]:
    """(module, object, first docstring paragraph) from the top-level standard-library modules."""
    out = []
    for mod, _, tree in _stdlib_trees(max_files):
        doc = ast.get_docstring(tree)
        if doc and len(doc) > 40:
            out.append((mod, "", _first_paragraph(doc)))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                d = ast.get_docstring(node)
                if d and len(d) > 40:
                    out.append((mod, node.name, _first_paragraph(d)))
    return out


def stdlib_functions(max_files: int | None = None, lines=(4, 30)) -> list[tuple[str, str, str]]:
    """(module, function name, source) of the short top-level functions of the standard library."""
    out = []
    for mod, text, tree in _stdlib_trees(max_files):
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and lines[0] <= node.end_lineno - node.lineno + 1 <= lines[1]:
                src = ast.get_source_segment(text, node)
                if src:
                    out.append((mod, node.name, src))
    return out


def package_summaries() -> list[tuple[str, str]]:
    """(name, one-line summary) of the installed distributions."""
    seen, out = set(), []
    for dist in importlib.metadata.distributions():
        try:
            name, summary = dist.metadata["Name"] or "", dist.metadata.get("Summary") or ""
        except Exception:
            continue
        if name and name.lower() not in seen and 20 <= len(summary) <= 300:
            seen.add(name.lower())
            out.append((name, " ".join(summary.split())))
    return sorted(out)


def unicode_names(lo: int, hi: int) -> list[tuple[str, str]]:
    return [(chr(c), unicodedata.name(chr(c))) for c in range(lo, hi) if unicodedata.name(chr(c), "")]


def script_names() -> list[str]:
    """Writing systems named in the Unicode database (``GEORGIAN LETTER AN`` -> Georgian)."""
    names = set()
    for c in range(0x370, 0x2000):
        n = unicodedata.name(chr(c), "")
        if " LETTER " in n and unicodedata.category(chr(c)).startswith("L"):
            names.add(n.split(" ", 1)[0].title())
    return sorted(names)


class Sources:
    """What the templates draw from, read once."""

    def __init__(self, max_files: int | None = None):
        self.snippets = stdlib_snippets(max_files)
        self.functions = stdlib_functions(max_files)
        self.packages = package_summaries()
        self.math_symbols = unicode_names(0x2200, 0x2270)
        self.greek = unicode_names(0x3B1, 0x3CA)
        self.scripts = script_names()
        self.keywords = [k for k in keyword.kwlist if k.isalpha()]


# --------------------------------------------------------------------------- slot lists
NAMES = ["Amara", "Bruno", "Chen", "Dalia", "Emeka", "Freya", "Goran", "Hana", "Ivan", "Jonas", "Keiko", "Lucia",
         "Mateo", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yusuf"]
CITIES = ["Porto", "Nairobi", "Osaka", "Lima", "Krakow", "Halifax", "Tbilisi", "Adelaide", "Bergen", "Cusco",
          "Dakar", "Hanoi", "Leeds", "Mendoza", "Tartu", "Zagreb"]
JOBS = ["nurse", "carpenter", "accountant", "pilot", "librarian", "baker", "electrician", "teacher", "architect",
        "translator", "pharmacist", "gardener"]
ITEMS = ["notebooks", "apples", "tickets", "light bulbs", "bags of rice", "pencils", "mugs", "plant pots", "batteries"]
FORMATS = ["a short poem", "a sonnet", "a limerick", "a short story", "a persuasive essay", "a formal email",
           "a product description", "a wedding toast", "a diary entry", "a cover letter", "a news report",
           "a blog post", "a letter to an old friend", "a radio advertisement", "a film pitch", "song lyrics",
           "a restaurant review", "a fable with a moral", "a eulogy for a houseplant", "a motivational speech"]
LENGTHS = ["in about 100 words", "in under 200 words", "in three paragraphs", "in five sentences",
           "in about 300 words", "in exactly four lines", "in two short paragraphs"]
TONES = ["humorous", "formal", "warm", "dramatic", "hopeful", "wistful", "playful", "solemn"]
AUDIENCES = ["for children", "for a general audience", "for busy managers", "for teenagers", "for retirees",
             "for new employees", "for a school newsletter"]
TOPICS = ["a lighthouse on a stormy night", "learning to ride a bicycle as an adult", "a village bakery at dawn",
          "moving to a new city", "the first snowfall of the year", "a lost umbrella", "a community garden",
          "a night train across the mountains", "an old family recipe", "a robot that wants to paint",
          "working from home", "a rainy market day", "a retiring school janitor", "the smell of old books",
          "a chess tournament", "a volunteer fire brigade", "a neighbourhood power cut", "a kite festival",
          "saving money for a first car", "a bee-keeper's year", "an abandoned railway station"]
PERSONAS = ["a ship's captain in the 1800s", "a medieval blacksmith", "a grumpy but kind librarian",
            "a cheerful fitness coach", "a detective in a noir novel", "a museum tour guide", "a travel agent",
            "a wise old wizard", "a startup founder pitching to investors", "a football commentator",
            "a nutritionist", "a patient customer-support agent", "a high-school chemistry teacher",
            "an astronaut on a space station", "a sheep farmer", "a job interviewer at a bank",
            "a stand-up comedian", "a park ranger", "a head chef in a busy kitchen",
            "a robot learning about humans", "a time traveller from the year 2300", "a Victorian poet",
            "a village mayor", "a lighthouse keeper", "a zookeeper", "a pirate quartermaster", "a bus driver",
            "a royal court jester", "a marine biologist", "a medieval scribe"]
ROLE_ASKS = ["What is the best advice you have ever been given?", "Tell me about the hardest day you remember.",
             "A customer says their order arrived broken. What do you say?", "What do you love about your work?",
             "How would you spend a free afternoon?", "What should a beginner in your line of work know first?",
             "Someone doubts you can do your job. Answer them.", "Describe the view from where you are standing.",
             "What worries you most these days?", "Convince me to join you for the day."]
CONCEPTS = ["photosynthesis", "entropy", "plate tectonics", "the Doppler effect", "gene editing with CRISPR",
            "how vaccines train the immune system", "black holes", "superconductivity", "the greenhouse effect",
            "neural networks", "public-key cryptography", "Ohm's law", "Newton's laws of motion",
            "natural selection", "the pH scale", "radioactive decay", "hash tables", "the Fourier transform",
            "osmosis", "the speed of light", "tides", "antibiotic resistance", "semiconductors",
            "the water cycle", "compilers", "error-correcting codes", "the Carnot cycle", "continental drift",
            "enzymes", "the Big Bang", "binary numbers", "lasers", "the Krebs cycle", "sound waves",
            "electric motors", "GPS positioning", "the periodic table", "probability distributions"]
HUMANITIES = ["the printing press", "the Renaissance", "the Silk Road", "the Industrial Revolution", "stoicism",
              "utilitarianism", "the social contract", "impressionist painting", "the fall of the Western Roman Empire",
              "supply and demand", "inflation", "the scientific revolution", "the Reformation", "the Enlightenment",
              "the Meiji Restoration", "existentialism", "the invention of writing", "the Hanseatic League",
              "Greek tragedy", "the abolition of slavery", "the Cold War", "the French Revolution",
              "comparative advantage in trade", "the history of public libraries", "Baroque music",
              "the Ottoman Empire", "the Olympic Games in antiquity", "the rise of the novel", "free will",
              "the tragedy of the commons", "the Marshall Plan", "oral storytelling traditions"]
LANGS = ["Python", "JavaScript", "C++", "Java", "Go", "Rust", "C", "TypeScript"]
TASKS = ["reverses a singly linked list", "checks whether a string is a palindrome, ignoring punctuation",
         "returns the k largest numbers of a list", "merges two sorted arrays into one sorted array",
         "computes the n-th Fibonacci number in logarithmic time", "parses one CSV line with quoted fields",
         "performs binary search on a sorted array", "counts the word frequencies of a text file",
         "detects a cycle in a directed graph", "implements a least-recently-used cache",
         "rotates a square matrix by 90 degrees", "validates an IPv4 address", "flattens a nested list",
         "finds all anagram groups in a list of words", "converts a Roman numeral to an integer",
         "computes the edit distance between two strings", "shuffles a list uniformly at random",
         "evaluates an arithmetic expression given as a string", "finds the shortest path in a grid maze",
         "removes duplicate lines from a file while keeping their order", "computes prime numbers up to n",
         "groups records by a key and sums a field", "serialises a binary tree to a string and back",
         "checks whether parentheses in a string are balanced", "splits a list into chunks of size n"]
QUALITIES = {"taller": "tallest", "older": "oldest", "faster": "fastest", "richer": "richest",
             "heavier": "heaviest", "quieter": "quietest"}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _pick(rng, seq, k=None):
    return rng.choice(seq) if k is None else rng.sample(seq, k)


def _nonsense(rng):
    return "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3)) + "s"


def _topic(rng, src):
    if src.packages and rng.random() < 0.3:
        name, summary = _pick(rng, src.packages)
        return f"a software tool described as \"{summary.rstrip('.')}\""
    return _pick(rng, TOPICS)


def _garble(rng, text):
    """A paragraph with a few slips for an editor to fix."""
    words = text.split()
    for _ in range(max(1, len(words) // 12)):
        i = rng.randrange(len(words))
        w = words[i]
        if len(w) > 3:
            j = rng.randrange(len(w) - 1)
            words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
        elif rng.random() < 0.5:
            words[i] = ""
    return " ".join(w for w in words if w)


# --------------------------------------------------------------------------- kinds
def writing(rng, src):
    f, t, n, tone, aud = _pick(rng, FORMATS), _topic(rng, src), _pick(rng, LENGTHS), _pick(rng, TONES), \
        _pick(rng, AUDIENCES)
    choices = [f"Write {f} about {t}, {n}, {tone} in tone.",
               f"Draft {f} {aud} about {t}. Keep it {n[3:] if n.startswith('in ') else n}.",
               f"Compose {f} that describes {t}. Make it {tone}.",
               f"Give me five possible titles for {f} about {t}, then pick the best one and say why.",
               f"Write an outline for {f} about {t}, with a heading for each part.",
               f"Write {f} {aud} about {t}, then rewrite its first sentence in a {tone} voice."]
    if src.snippets:
        _, _, doc = _pick(rng, src.snippets)
        choices.append(f"Edit this paragraph for spelling, grammar and clarity, then list your changes:\n\n"
                       f"{_garble(rng, doc)}")
    return _pick(rng, choices)


def roleplay(rng, src):
    p, other = _pick(rng, PERSONAS, 2)
    return _pick(rng, [
        f"Pretend you are {p}. {_pick(rng, ROLE_ASKS)}",
        f"You are {p}. Stay in character and answer: {_pick(rng, ROLE_ASKS)}",
        f"Act as {p} and explain {_pick(rng, CONCEPTS + HUMANITIES)} to a newcomer.",
        f"Imagine you are {p}. Describe a typical day of yours {_pick(rng, LENGTHS)}.",
        f"Role-play as {p}. I am {other}, and I have just walked in. Start the conversation.",
        f"Speak as {p} giving a short welcome speech at {_pick(rng, TOPICS)}.",
    ])


def reasoning(rng, src):
    names = _pick(rng, NAMES, rng.randint(3, 5))
    q = _pick(rng, sorted(QUALITIES))
    pairs = [f"{a} is {q} than {b}." for a, b in zip(names, names[1:])]
    rng.shuffle(pairs)
    a, b, c = (_nonsense(rng) for _ in range(3))
    x, y, z = _pick(rng, NAMES, 3)
    n, d = rng.randint(5, 400), _pick(rng, DAYS)
    k = rng.randint(3, 9)
    start, step = rng.randint(1, 20), rng.randint(2, 9)
    seq = _pick(rng, [[start + i * step for i in range(5)], [start * step ** i for i in range(4)],
                      [(start + i) ** 2 for i in range(5)]])
    return _pick(rng, [
        " ".join(pairs) + f" Who is the {QUALITIES[q]}? Explain your reasoning step by step.",
        " ".join(pairs) + f" Is it true that {names[-1]} is {q} than {names[0]}? Explain.",
        f"All {a} are {b}. Some {b} are {c}. Does it follow that some {a} are {c}? Explain why or why not.",
        f"No {a} are {b}, and every {c} is a {b[:-1]}. Can a {c[:-1]} be a {a[:-1]}? Reason it out.",
        f"If today is {d}, what day of the week will it be in {n} days? Show how you worked it out.",
        f"{x} is the mother of {y}. {y} is the sister of {z}. How are {x} and {z} related?",
        f"There are {n % 40 + 3} people at a party and each shakes hands once with every other person. "
        "How many handshakes happen? Explain.",
        f"What comes next in the sequence {', '.join(map(str, seq))}? Explain the pattern.",
        f"If {k} machines take {k} minutes to make {k} parts, how long do {k * 20} machines take to make "
        f"{k * 20} parts? Explain.",
        f"{x} says: \"{y} is lying.\" {y} says: \"{z} is lying.\" {z} says: \"{x} and {y} are both lying.\" "
        "Who is telling the truth?",
    ])


def _signed(v):
    return f"- {-v}" if v < 0 else f"+ {v}"


def _a(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def math(rng, src):
    r = rng.randint
    a, b, c, d = r(2, 99), r(2, 99), r(2, 30), r(1, 12)
    x = r(-9, 15)
    name, item = _pick(rng, NAMES), _pick(rng, ITEMS)
    p1, p2 = r(2, 9), r(1, 9)
    return _pick(rng, [
        f"Compute {a} * {b} - {c} * {d} + {r(100, 999)}. Show your steps.",
        f"Solve for x: {c}x + {a} = {c * x + a}.",
        f"Solve the system: {p1}x + {p2}y = {p1 * x + p2 * d}, x - y = {x - d}.",
        f"{name} buys {d} {item} at ${c}.{r(0, 9)}0 each and pays with a ${(d * (c + 1) // 10 + 1) * 10} note. "
        "How much change is due?",
        f"A train travels {a * 5} km in {d} hours and then {b * 3} km in {c % 5 + 1} hours. "
        "What is its average speed over the whole trip?",
        f"A jacket costs ${a * 3} and is discounted by {r(1, 9) * 5}%, then taxed at {r(5, 20)}%. "
        "What is the final price?",
        f"What is {r(2, 9)}/{r(10, 13)} + {r(1, 7)}/{r(8, 9)} as a fraction in lowest terms?",
        f"Find the area and perimeter of a rectangle {a} cm by {b} cm.",
        f"A triangle has vertices at ({r(-5, 5)}, {r(-5, 5)}), ({r(-5, 5)}, {r(-5, 5)}) and "
        f"({r(-5, 5)}, {r(-5, 5)}). What is its area?",
        f"Two fair dice are rolled. What is the probability that the sum is {r(2, 12)}?",
        f"A bag holds {d} red and {c} blue marbles. Two are drawn without replacement. What is the "
        "probability that both are red?",
        f"What are the greatest common divisor and the least common multiple of {a * d} and {b * d}?",
        f"Is {r(101, 9999)} a prime number? Explain how you checked.",
        f"Find the roots of x^2 {_signed(-(x + d))}x {_signed(x * d)} = 0.",
        f"${a * 100} is invested at {d}% interest compounded yearly. How much is it worth after {c % 10 + 2} years?",
        f"The mean of {', '.join(str(r(1, 99)) for _ in range(d % 5 + 4))} is what? And the median?",
        f"Convert {a * 7} miles per hour to metres per second.",
    ])


def _mutate(rng, src):
    for old, new in rng.sample([("<=", "<"), (" < ", " <= "), ("+ 1", "- 1"), ("==", "!="), (" and ", " or "),
                                ("return ", "return not "), ("[0]", "[1]")], 7):
        if old in src:
            i = rng.choice([k for k in range(len(src)) if src.startswith(old, k)])
            return src[:i] + new + src[i + len(old):]
    return None


def coding(rng, src):
    choices = [f"Write a {_pick(rng, LANGS)} function that {_pick(rng, TASKS)}. Explain its time complexity.",
               f"In {_pick(rng, LANGS)}, implement a function that {_pick(rng, TASKS)}, with a few test cases."]
    if src.keywords:
        choices.append(f"What does the Python keyword `{_pick(rng, src.keywords)}` do? Give a short example.")
    if src.functions:
        mod, name, code = _pick(rng, src.functions)
        block = f"```python\n{code}\n```"
        choices += [f"Explain what this Python function from `{mod}` does, step by step:\n\n{block}",
                    f"Rewrite this function to be easier to read and add type hints:\n\n{block}",
                    f"Write pytest unit tests for this function:\n\n{block}"]
        bug = _mutate(rng, code)
        if bug:
            choices.append(f"This function has a bug. Find it and give the fixed version:\n\n```python\n{bug}\n```")
    if src.snippets:
        mod, obj, doc = _pick(rng, src.snippets)
        choices.append(f"Write a Python function that does the following, without importing `{mod}`: {doc}")
    return _pick(rng, choices)


def extraction(rng, src):
    people = [(n, rng.randint(19, 80), _pick(rng, CITIES), _pick(rng, JOBS)) for n in _pick(rng, NAMES, 4)]
    text = " ".join(_pick(rng, [f"{n}, aged {a}, lives in {c} and works as {_a(j)}.",
                                f"In {c} there is {n}, {_a(j)} who is {a} years old.",
                                f"{n} ({a}) is {_a(j)} based in {c}."]) for n, a, c, j in people)
    rows = "\n".join(f"{_pick(rng, ITEMS)}: Q1 {rng.randint(10, 500)}, Q2 {rng.randint(10, 500)}, "
                     f"Q3 {rng.randint(10, 500)}" for _ in range(4))
    choices = [f"Extract each person's name, age, city and job from the text below as a JSON array.\n\n{text}",
               f"From the text below, make a CSV table with the columns name, city and job.\n\n{text}",
               f"Here are sales figures by quarter:\n{rows}\nWhich line has the highest total? Answer with "
               "the item and its total, then the totals of all lines."]
    if src.functions:
        mod, name, code = _pick(rng, src.functions)
        choices.append("List every variable name assigned in this function, and every function it calls, as "
                       f"JSON with keys \"variables\" and \"calls\".\n\n```python\n{code}\n```")
    if src.packages:
        picked = _pick(rng, src.packages, min(4, len(src.packages)))
        listing = "\n".join(f"- {n}: {s}" for n, s in picked)
        choices.append(f"From this list of software packages, extract each name and a three-word label of "
                       f"what it does, as a JSON object.\n\n{listing}")
    if src.snippets:
        mod, obj, doc = _pick(rng, src.snippets)
        choices.append(f"List the technical terms in this text, each with a one-line definition:\n\n{doc}")
    if src.greek:
        chars = _pick(rng, src.greek, min(5, len(src.greek)))
        choices.append("For each of these characters, give its Unicode name and whether it is upper or lower "
                       f"case: {' '.join(ch for ch, _ in chars)}")
    return _pick(rng, choices)


def stem(rng, src):
    c1, c2 = _pick(rng, CONCEPTS, 2)
    choices = [f"Explain {c1} in simple terms.", f"What is {c1}, and why does it matter in everyday life?",
               f"Describe an experiment or demonstration that shows {c1}.", f"Compare {c1} and {c2}.",
               f"What are common misconceptions about {c1}?", f"How would you teach {c1} to a twelve-year-old?",
               f"Give a short history of how {c1} was discovered or developed."]
    if src.math_symbols:
        ch, name = _pick(rng, src.math_symbols)
        choices.append(f"What does the symbol {ch} ({name.lower()}) mean in mathematics, and where is it used?")
    if src.greek:
        ch, name = _pick(rng, src.greek)
        choices.append(f"In physics or engineering, what quantities are usually written with {ch} "
                       f"({name.lower()})? Give examples with units.")
    if src.snippets:
        mod, obj, doc = _pick(rng, src.snippets)
        choices.append(f"Explain the mathematics or science behind this description:\n\n{doc}")
    return _pick(rng, choices)


def humanities(rng, src):
    t1, t2 = _pick(rng, HUMANITIES, 2)
    choices = [f"Discuss the causes and consequences of {t1}.", f"What can {t1} teach us today?",
               f"Write a short essay comparing {t1} and {t2}.", f"Explain the historical context of {t1}.",
               f"How did {t1} shape the modern world? Give three examples.",
               f"Summarise the strongest arguments for and against {t1}.",
               f"Suggest three books or sources for learning about {t1}, and say what each offers."]
    if src.scripts:
        choices.append(f"Tell me about the history of the {_pick(rng, src.scripts)} writing system.")
    return _pick(rng, choices)


TEMPLATES_MODULE = [
    "Explain what the Python module `{mod}` is for, with an example of when you would use it.",
    "I am new to Python. What does the standard library module `{mod}` do?",
    "Summarize the following description in two sentences:\n\n{doc}",
    "Write a short blog post introduction about the Python module `{mod}`, based on this: {doc}",
]
TEMPLATES_OBJECT = [
    "What does `{mod}.{obj}` do in Python? Here is its documentation: {doc}",
    "Write a short Python example that uses `{mod}.{obj}`.",
    "Rewrite this documentation in simpler words for a beginner:\n\n{doc}",
    "List three situations in which `{mod}.{obj}` is useful.",
    "Explain the following in your own words, then give a one-line summary:\n\n{doc}",
    "Is `{mod}.{obj}` a good choice for a small script? Answer briefly and explain why.",
    "Turn this description into a numbered list of its main points:\n\n{doc}",
    "Compare `{mod}.{obj}` with doing the same thing by hand. {doc}",
]


def docstring(rng, src):
    if not src.snippets:
        return None
    mod, obj, doc = _pick(rng, src.snippets)
    return _pick(rng, TEMPLATES_OBJECT if obj else TEMPLATES_MODULE).format(mod=mod, obj=obj, doc=doc)


MAKERS = {k: globals()[k] for k in KINDS}


# --------------------------------------------------------------------------- the mix
def parse_mix(spec: str) -> dict[str, float]:
    """``"writing=2,math=1"`` -> {kind: weight}; unknown kinds and negative weights are refused."""
    mix = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        kind, _, w = part.partition("=")
        if kind not in KINDS:
            raise ValueError(f"unknown prompt kind {kind!r} (kinds: {', '.join(KINDS)})")
        try:
            mix[kind] = float(w) if w else 1.0
        except ValueError:
            raise ValueError(f"weight of {kind!r} is not a number: {w!r}") from None
        if mix[kind] < 0:
            raise ValueError(f"weight of {kind!r} is negative")
    if not any(mix.values()):
        raise ValueError(f"no kind has a positive weight in {spec!r}")
    return mix


def counts(n: int, mix: dict[str, float]) -> dict[str, int]:
    """n prompts shared out by weight, largest remainders first, in KINDS order."""
    total = sum(mix.values())
    exact = {k: n * w / total for k, w in mix.items() if w > 0}
    out = {k: int(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: (out[k] - exact[k], KINDS.index(k)))[: n - sum(out.values())]:
        out[k] += 1
    return {k: out[k] for k in KINDS if k in out}


def make_prompts(n: int, seed: int, mix: dict[str, float] | None = None, max_files: int | None = None,
                 sources: Sources | None = None) -> list[tuple[str, str]]:
    """n distinct (kind, prompt) pairs in the mix's proportions (fewer where a kind runs out of
    distinct prompts), shuffled so that a budget cut anywhere keeps the proportions."""
    src = sources or Sources(max_files)
    rng = random.Random(seed)
    out, seen = [], set()
    for kind, want in counts(n, mix or parse_mix(DEFAULT_MIX)).items():
        made = tries = 0
        while made < want and tries < 20 * want + 20:
            tries += 1
            p = MAKERS[kind](rng, src)
            if p and p not in seen:
                seen.add(p)
                out.append((kind, p))
                made += 1
    rng.shuffle(out)
    return out

