"""How problems are said: one line for an operator (:mod:`~ccadapter.report.problems`), and
a repeated one at most once a minute (:mod:`~ccadapter.report.loggate`)."""
