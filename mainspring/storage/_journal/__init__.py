"""The journal every backend stores: an execution as a head plus keyed, ordered parts
(``model``, its keys in ``keys``), a commit as the changes from the version stored last,
read back by ``fold``, with the history entries a commit adds (``commit_events``) and the
durable history they make (``history``)."""
