"""The backends: the contract every store keeps (``contract``: the ``Store`` protocol, whose
docstring is the written contract), the compare-and-set template the three stores share
(``compare_and_set``), the memory and evidence each of them holds and forwards its calls to
(``holding``), and one folder per backend (``file``, ``sqlite``, ``postgres``), each with
its store, its schema or layout, its memory and its evidence."""
