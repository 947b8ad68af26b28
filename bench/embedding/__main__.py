from bench.embedding.run import main

raise SystemExit(main())
