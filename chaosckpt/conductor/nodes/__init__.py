"""Jobs that span machines: a node process on every machine runs that machine's launcher and streams its
events to the conductor over TCP (``node``), the conductor starts the nodes and conducts them as one run
(``conduct``), and ``cluster`` says where the nodes are and how each is started."""
