#!/usr/bin/env python3
"""Writes the story grid: every character x place x extra, 24 prompts for eval-modules.

The five hand-written story prompts are too few to measure top-1 agreement finely (one step of
160 is 0.6%); this grid picks modules systematically, not by how they score. Run it from this
folder: python3 make_grid.py (it rewrites grid.txt and the prompt files).
"""

CHARACTERS = {"lily": "Lily", "tim": "Tim", "sue": "Sue"}
PLACES = ["park", "lake"]
EXTRAS = {
    "plain": [],
    "weather": ["<weather/>"],
    "askanswer": ["<ask/>", "<answer/>"],
    "find": ['<find thing=" red kite"/>'],
}
CLOSINGS = {"plain": " said,", "weather": " looked up and", "askanswer": " ran to",
            "find": " picked it up and"}


def main():
    names = []
    for who, name in CHARACTERS.items():
        for place in PLACES:
            for extra, tags in EXTRAS.items():
                if extra == "weather":
                    body = [f"<{who}/>"] + tags + [f"<{place}/>"]
                else:
                    body = [f"<{who}/>", f"<{place}/>"] + tags
                lines = ['<prompt schema="story">'] + ["  " + t for t in body]
                lines.append(f"  <![CDATA[\n{name}{CLOSINGS[extra]}]]>")
                lines.append("</prompt>")
                file = f"{who}-{place}-{extra}.xml"
                with open(file, "w") as f:
                    f.write("\n".join(lines) + "\n")
                names.append(file)
    with open("grid.txt", "w") as f:
        f.write("# Written by make_grid.py: every character x place x extra of story.xml.\n")
        f.write("\n".join(names) + "\n")


if __name__ == "__main__":
    main()
