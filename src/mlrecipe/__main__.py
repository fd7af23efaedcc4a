from mlrecipe.cli.app import main

main()
