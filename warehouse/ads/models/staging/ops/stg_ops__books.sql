with

source as (

    select * from {{ lake_source('ops', 'books') }}

),

renamed as (

    select

        ----------  strings
        table_name,

        ----------  numerics
        ods_rows,
        dwd_rows,
        duplicates,
        quarantined,
        malformed,

        ----------  booleans
        balanced as is_balanced,

        ----------  timestamps
        event_date

    from source

)

select * from renamed
