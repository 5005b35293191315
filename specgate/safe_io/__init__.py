"""The ground floor: safe IO — reading and writing files whatever is at the path
(``files``) and showing engine text inert in every format (``text_safety``). It imports
nothing of specgate above it."""
