"""docsection: the benchmarks' one way of writing their results into docs/PERFORMANCE.md."""
import os


def put_section(path, heading, text):
    """Replace the section of the markdown file at path that starts with heading (up to the next
    "## " heading) with text, or append text when the file has no such section (creating the
    file when it is absent)."""
    doc = open(path).read() if os.path.exists(path) else \
        "# Performance\n\nEvery number here comes from a script in `tests/bench/`; rerun it to check.\n\n"
    start = doc.find(heading)
    if start >= 0:
        end = doc.find("\n## ", start + 3)
        doc = doc[:start] + text + (doc[end + 1:] if end >= 0 else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(doc)
