from ccadapter.cli import main

main()
