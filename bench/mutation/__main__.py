from bench.mutation.run import main

raise SystemExit(main())
