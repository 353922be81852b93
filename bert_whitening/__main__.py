import sys

from bert_whitening.cli import main

sys.exit(main())
