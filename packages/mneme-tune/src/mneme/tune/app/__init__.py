"""The whole application: where its GPU time goes (``rank``, ``mneme profile``), every
kernel that matters tuned under one budget (``tune_application``, ``mneme tune --app``),
and the report that ``mneme run --apply`` swaps in and measures."""

from .profile import NoProfileError, ProfileRow, Ranking, rank

__all__ = ["NoProfileError", "ProfileRow", "Ranking", "rank"]
