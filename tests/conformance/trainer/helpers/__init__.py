"""Lightning's test helpers (``tests_pytorch/helpers``, ``lightning.pytorch.demos.boring_classes``), ported by
``port.py`` with their imports swapped, plus ``runif.py`` and ``public.py`` written for this suite."""
