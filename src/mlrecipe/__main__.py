from mlrecipe.cli.entry import main

main()
