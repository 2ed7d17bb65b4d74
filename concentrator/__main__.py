from concentrator.cli import main

raise SystemExit(main())
