"""Which of a bundle unit's wheels setup installs, and what they shadow on the machine.

    python bundle_select.py MANIFEST SHADOWS_OUT    (on the GPU machine, outside the bundle's site)
    python bundle_select.py --line SHADOWS_OUT      the one line: "shadows the machine's torch 2.11.0->2.14.1, ..."

prints the wheel files to install, one a line, and appends "name have->bundled" for every package the
machine has at another version to SHADOWS_OUT (setup says them in one line). A manifest line is
"wheel-file name version policy" (make_bundle.sh); policy "always" installs, "min:V" only where the
machine lacks the package or has it older than V. "slimmed ..." lines are skipped.
"""

import sys
from importlib.metadata import PackageNotFoundError, version

from packaging.version import Version


def select(lines, have_version):
    """(wheels to install, shadow notes, kept notes) of a manifest's lines; ``have_version(name)`` is the
    machine's version or None."""
    install, shadows, kept = [], [], []
    for line in lines:
        fields = line.split()
        if not fields or fields[0] == "slimmed":
            continue
        wheel, name, ver, policy = fields[:4]
        have = have_version(name)
        if policy.startswith("min:") and have is not None and Version(have) >= Version(policy[4:]):
            kept.append(f"{name}=={have} (bundle has {ver})")
            continue
        if have is not None and have != ver:
            shadows.append(f"{name} {have}->{ver}")
        install.append(wheel)
    return install, shadows, kept


def shadow_line(notes):
    """One line for setup's log: every package the bundle installs over another version of the machine's."""
    return "shadows the machine's " + (", ".join(notes) if notes else "nothing")


def _machine_version(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def main(argv):
    if argv[0] == "--line":  # the one line setup says, from the notes main() appended
        with open(argv[1]) as f:
            print(shadow_line(list(dict.fromkeys(line.strip() for line in f if line.strip()))))
        return 0
    manifest, shadows_out = argv
    with open(manifest) as f:
        install, shadows, kept = select(f, _machine_version)
    for note in kept:
        print(f"   keep machine {note}", file=sys.stderr)
    with open(shadows_out, "a") as f:
        f.writelines(s + "\n" for s in shadows)
    print("\n".join(install))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
