#!/usr/bin/env python3
"""Writes the benchmark schemas and prompts of docs/benchmarks.md ("Modular prompt cache").

Deterministic (seeded) plain English-like prose; the benchmark models are synthetic, so only
the token counts matter. Run from anywhere: files go beside this script.

  docswap/  a ~700-word system text and a union of 8 documents of ~300 words (src files);
            q1.xml .. q8.xml each pick one document and ask a short question. pairs.xml: the
            same text and documents as separate modules; pair1.xml .. pair4.xml each pick two
            (the second was encoded without the first: what selective recompute repairs).
  paper/    schemas whose modules total about 1K, 2K and 4K tokens (modules of ~256 tokens);
            prompt-NK.xml includes every module and asks a short question.
"""
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

SUBJECTS = ["the device", "the manual", "the support team", "each customer", "the battery",
            "the screen", "the service plan", "the warranty", "the charger", "the owner",
            "the technician", "the app", "the network", "the sensor", "the firmware"]
VERBS = ["describes", "explains", "requires", "covers", "protects", "updates", "checks",
         "replaces", "supports", "reports", "measures", "connects", "controls", "stores"]
OBJECTS = ["the power settings", "a short reset", "the daily schedule", "every new account",
           "the main menu", "a clear warning", "the spare parts", "the safety rules",
           "the monthly report", "a simple test", "the default options", "the last backup",
           "the cooling fan", "the user profile", "the travel mode", "the sound level"]
TAILS = ["before the first use", "in most cases", "when the light turns red",
         "after a software update", "during the night", "at least once a week",
         "if the cable is damaged", "without any extra cost", "for ten seconds",
         "in cold weather", "while the unit is charging", "as shown in the picture"]


def sentence(rng):
    s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}."
    return s[0].upper() + s[1:]


def prose(rng, words):
    out, n = [], 0
    while n < words:
        s = sentence(rng)
        out.append(s)
        n += len(s.split())
    return " ".join(out)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def docswap():
    rng = random.Random(1)
    system = prose(rng, 700)
    d = os.path.join(HERE, "docswap")
    members = []
    for i in range(1, 9):
        write(os.path.join(d, f"doc{i}.txt"), f"Document {i}.\n{prose(rng, 300)}\n")
        members.append(f'    <module name="doc{i}" src="doc{i}.txt"/>')
    write(os.path.join(d, "schema.xml"),
          '<schema name="docswap"><![CDATA[You are the support assistant of ACME. '
          'Answer from the document only.\n' + system + '\n]]>\n  <union>\n' +
          "\n".join(members) + "\n  </union>\n</schema>\n")
    for i in range(1, 9):
        write(os.path.join(d, f"q{i}.xml"),
              f'<prompt schema="docswap">\n  <doc{i}/>\n  Question: what does document {i} '
              'say about the battery? Answer:\n</prompt>\n')
    write(os.path.join(d, "pairs.xml"),
          '<schema name="docpairs"><![CDATA[You are the support assistant of ACME. '
          'Answer from the documents only.\n' + system + '\n]]>\n' +
          "\n".join(m.replace("    ", "  ", 1) for m in members) + "\n</schema>\n")
    for i in range(1, 5):
        write(os.path.join(d, f"pair{i}.xml"),
              f'<prompt schema="docpairs">\n  <doc{i}/>\n  <doc{i + 4}/>\n  Question: what do '
              f'documents {i} and {i + 4} say about the battery? Answer:\n</prompt>\n')


def paper():
    d = os.path.join(HERE, "paper")
    for k in (1, 2, 4):
        rng = random.Random(10 + k)
        n = 4 * k  # modules of ~256 tokens
        mods = [f'  <module name="m{j}"><![CDATA[\n{prose(rng, 227)}]]></module>' for j in range(n)]
        write(os.path.join(d, f"schema-{k}k.xml"),
              f'<schema name="paper{k}k">Context for the question below.\n' + "\n".join(mods) +
              "\n</schema>\n")
        refs = "".join(f"<m{j}/>" for j in range(n))
        write(os.path.join(d, f"prompt-{k}k.xml"),
              f'<prompt schema="paper{k}k">{refs}<![CDATA[\nQuestion: what should the owner check '
              'first? Answer:]]></prompt>\n')


if __name__ == "__main__":
    docswap()
    paper()
