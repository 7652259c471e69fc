from acceltrace.cli import main

raise SystemExit(main())
