"""A zip-based document (Word, PowerPoint, Excel, OpenDocument, EPUB) read within budgets and
written back changing only the members that hold translated text.

    package = Package.read(data, "report.docx")      # refused by name when it is no zip, or too big
    xml = package.member("word/document.xml")        # bytes, within MAX_PART
    out = package.write({"word/document.xml": new})   # every other member the same bytes

A zip says how big each member is before anything is read: a package whose members would expand
beyond MAX_TOTAL, a text part beyond MAX_PART, or a member whose ratio of expanded to stored size
passes MAX_RATIO (a zip bomb: 10 MB that expand to 3 GB) is refused at once, naming the member and
the limit, before any is expanded. Those sizes bind the reader too: Python's zipfile stops a
member at its stated size and checks its CRC, so a lying header yields an error, not more bytes.
Members are copied to the new package one at a time (a few MB of memory whatever the package
holds), each with its name, order, date, permissions and compression: a member nmt did not change
has the same bytes inside the new zip (the `mimetype` of OpenDocument and EPUB stays first and
stored). Only the parts a format reads to translate are held in memory, and only those changed are
written anew.
"""

from __future__ import annotations

import io
import shutil
import zipfile

from nmt.errors import NMTError

MAX_TOTAL = 2 * 1024**3  # bytes all members may expand to (pictures and media included)
MAX_PART = 64 * 1024**2  # bytes a part read as text (XML) may expand to
MAX_RATIO = 100  # expanded / stored, for members over RATIO_FROM bytes expanded
RATIO_FROM = 4 * 1024**2
MAX_MEMBERS = 20_000


class Package:
    """A zip-based document's members (see the module's notes)."""

    def __init__(self, data: bytes, name: str, archive: zipfile.ZipFile) -> None:
        self.data, self.name, self.archive = data, name, archive
        self.infos = archive.infolist()

    @classmethod
    def read(cls, data: bytes, name: str) -> Package:
        """The package `data` (the file `name`, for messages), its stated sizes checked."""
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile as err:
            raise NMTError(f"{name}: not a zip package as its name says ({err})") from None
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise NMTError(f"{name}: {len(infos)} members, more than the {MAX_MEMBERS} nmt reads")
        total = sum(i.file_size for i in infos)
        if total > MAX_TOTAL:
            raise NMTError(
                f"{name}: its members expand to {total:,} bytes, more than the {MAX_TOTAL:,} "
                "nmt reads (a zip bomb?)"
            )
        for info in infos:
            stored = max(info.compress_size, 1)
            if info.file_size > RATIO_FROM and info.file_size / stored > MAX_RATIO:
                raise NMTError(
                    f"{name}: member {info.filename} expands {info.file_size / stored:,.0f} "
                    f"times ({stored:,} to {info.file_size:,} bytes), more than the {MAX_RATIO} "
                    "nmt reads (a zip bomb?)"
                )
        return cls(data, name, archive)

    def names(self) -> list[str]:
        return [i.filename for i in self.infos]

    def has(self, member: str) -> bool:
        return member in self.archive.NameToInfo

    def member(self, member: str) -> bytes:
        """A member's bytes, for a part read as text: at most MAX_PART."""
        info = self.archive.getinfo(member)
        if info.file_size > MAX_PART:
            raise NMTError(
                f"{self.name}: {member} expands to {info.file_size:,} bytes, more than the "
                f"{MAX_PART:,} nmt reads of one part"
            )
        try:
            return self.archive.read(info)
        except (zipfile.BadZipFile, OSError, EOFError) as err:  # a CRC or size that lies
            raise NMTError(f"{self.name}: {member} cannot be read ({err})") from None

    def write(self, changed: dict[str, bytes]) -> bytes:
        """The package with `changed` members' new bytes, every other member copied as it was,
        in the same order, with the same name, date, permissions and compression."""
        unknown = set(changed) - set(self.names())
        if unknown:
            raise ValueError(f"no such members: {sorted(unknown)}")
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as new:
            for info in self.infos:
                copy = _copied_info(info)
                if info.filename in changed:
                    new.writestr(copy, changed[info.filename])
                    continue
                try:
                    with self.archive.open(info) as source, new.open(copy, "w") as target:
                        shutil.copyfileobj(source, target, 1024 * 1024)
                except (zipfile.BadZipFile, OSError, EOFError) as err:
                    raise NMTError(f"{self.name}: {info.filename} cannot be read ({err})") from None
        return out.getvalue()


def _copied_info(info: zipfile.ZipInfo) -> zipfile.ZipInfo:
    """A new entry like `info`: name, date, compression, permissions and comment kept."""
    copy = zipfile.ZipInfo(info.filename, date_time=info.date_time)
    copy.compress_type = info.compress_type
    copy.external_attr = info.external_attr
    copy.create_system = info.create_system
    copy.comment = info.comment
    copy.extra = info.extra
    copy.file_size = info.file_size  # lets zipfile choose ZIP64 as the original did
    return copy
